"""Figure 13 (scaling): how cost grows as work grows: encode time vs conversation length, and training
tokens/s vs sequence length, packed vs padded.

1. Encode. For each chat template with a tiny checkpoint (its ``swiftcore make-tiny`` tokenizer; ``qwen3``
   uses ``swiftcore_testing.engines.make_tiny_qwen3``'s), synthetic chats of exactly 1, 2, 4, ... user /
   assistant turns (the reference corpus' Q/A pairs, as :mod:`conversations` builds them; a system prompt in
   half the rows; every turn made unique) are encoded with ``Template.encode_batch`` (what
   ``template_encode.py`` times) and, as the floor, the Rust tokenizer's ``encode_batch`` + ``.ids`` over the
   same rows' ``Template.render`` texts (``template_encode.py``'s floor), alternating run by run, each timed
   call from a collected heap. Every point encodes ``max(64, 2048 // turns)`` rows: always one of
   ``encode_batch``'s 8192-row chunks, so every length runs the same code path.
2. Train. ``swiftcore train``'s own code (``swiftcore_train.dispatch.run_training``, the function the CLI
   calls) on a tiny Qwen3.5 (gated DeltaNet + softmax attention) and a tiny Qwen3 (softmax attention only),
   LoRA r=8 alpha=32, fp32, CPU, ``OMP_NUM_THREADS=1``, ``--max-steps`` steps per run, on samples whose
   lengths are drawn uniformly in [L/2, 3L/2] tokens for each L. Padded: ``--batch-size B --max-length 2L``.
   Packed: ``--packing --batch-size 1 --max-length B*L``, one packed row of about B samples a step, so both
   train about the same real tokens a step. tokens/s = real (non-pad) tokens ``num_input_tokens_seen`` over
   the trainer's ``train_runtime``; each family's runs share one child process (imports and start-up paid
   once; a warm-up run first), so peak RSS is that process's resident memory sampled every 10 ms during the
   run (libraries included; also given as growth over the run's start, which begins after a ``gc.collect`` and
   glibc's ``malloc_trim``). Packed and padded alternate, the
   order flipping from point to point. Optionally (``--profile``) one forward + backward of the same B
   samples padded and packed under ``torch.profiler`` at the length where packed does worst, when packed/padded
   is below :data:`PROFILE_BELOW` there.

Usage: ``python bench/scaling.py [--runs N] [--parts encode,train] [--templates qwen3_5,gemma4,...]
[--turns 1,2,4,8,16,32] [--families qwen3_5,qwen3] [--lengths 128,256,512,1024,2048] [--steps 8]
[--batch-size 4] [--profile] [--no-section]``; raw JSON goes to ``bench/raw/scaling.json``, the plots to
``bench/scaling_encode.png`` and ``bench/scaling_train.png``, and the section ``scaling`` of RESULTS.md is
replaced (or appended). :func:`run` returns the raw result, :func:`render` turns it into the section.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from common import ROOT, machine, pair_ratio, replace_section, run_child, summarize, timed, write_raw

BEGIN, END = "<!-- scaling:begin -->", "<!-- scaling:end -->"
HERE = Path(__file__).resolve().parent
ENCODE_PNG = HERE / "scaling_encode.png"
TRAIN_PNG = HERE / "scaling_train.png"

#: Template -> the model spec whose tiny checkpoint brings its tokenizer (``qwen3``: swiftcore_testing's).
TEMPLATE_MODELS = {
    "qwen3_5": "qwen3_5",
    "gemma4": "gemma4",
    "qwen3": "tiny_qwen3",
    "deepseek_v4": "deepseek_v4",
    "glm5": "glm5",
    "mimo_v2": "mimo_v2_flash",
    "olmoe": "olmoe",
}
TEMPLATES = tuple(TEMPLATE_MODELS)
TURNS = (1, 2, 4, 8, 16, 32)
#: Training families: the model spec and what its attention is.
FAMILIES = {
    "qwen3_5": "gated DeltaNet (3 layers) + softmax attention (1 layer)",
    "qwen3": "softmax attention only (2 layers)",
}
LENGTHS = (128, 256, 512, 1024, 2048)
#: ``--profile`` profiles a family's worst point when packed/padded tokens/s is below this there.
PROFILE_BELOW = 1.1
FLOOR = "Rust tokenizers.Tokenizer.encode_batch(rendered texts, add_special_tokens=False) + .ids"

__all__ = [
    "BEGIN",
    "END",
    "FAMILIES",
    "LENGTHS",
    "TEMPLATES",
    "TURNS",
    "encode_scaling",
    "length_rows",
    "plot",
    "profile_lines",
    "profile_step",
    "render",
    "run",
    "train_scaling",
    "turn_corpus",
    "write_section",
]


# ---------------------------------------------------------------------------------------------- data


def turn_corpus(n: int, turns: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` plain chats of exactly ``turns`` user/assistant turns from the reference corpus' pieces; a system
    prompt in half of them (as :func:`conversations.mixed_length_corpus`); every user turn made unique."""
    from conversations import _pieces, one_chat

    rng = random.Random(seed * 1000 + turns)
    p = _pieces()
    return [one_chat(rng, p, i, turns) for i in range(n)]


def length_rows(tpl: Any, tok: Any, length: int, count: int, seed: int = 0) -> tuple[list[dict], list[int]]:
    """``count`` chats whose encoded lengths (``tpl.encode``, as training encodes them) spread uniformly over
    [length/2, 3*length/2]: turns are added until the drawn target is reached, keeping whichever of the last
    two lengths is nearer to it (never over 3*length/2). Returns the rows and their token counts."""
    from conversations import _pieces

    rng = random.Random(seed * 7919 + length)
    p = _pieces()
    lo, hi = length // 2, length * 3 // 2
    rows, sizes = [], []
    while len(rows) < count:
        target = rng.randint(lo, hi)
        i = len(rows)
        messages: list[dict[str, Any]] = []
        if rng.random() < 0.5:
            messages.append({"role": "system", "content": rng.choice(p["systems"])})
        best: tuple[list, int] | None = None
        t = 0
        while True:
            q, a = rng.choice(p["pairs"])
            messages = [*messages, {"role": "user", "content": f"{q} ({i}.{t})"}, {"role": "assistant", "content": a}]
            t += 1
            n = len(tpl.encode(tok, {"messages": messages}).input_ids)
            if n > hi:
                break
            if best is None or abs(n - target) <= abs(best[1] - target):
                best = (messages, n)
            if n >= target:
                break
        if best is None or best[1] < lo:
            continue  # one turn overshot, or the chat stayed too short: draw again
        rows.append({"messages": best[0]})
        sizes.append(best[1])
    return rows, sizes


def expected_padding(sizes: Sequence[int], batch: int, draws: int = 200, seed: int = 0) -> float:
    """Padded tokens / real tokens of ``batch``-sample batches of a random order of ``sizes`` (mean of
    ``draws`` shuffles): what padding costs on this data."""
    rng = random.Random(seed)
    order = list(sizes)
    ratios = []
    for _ in range(draws):
        rng.shuffle(order)
        padded = sum(max(order[i : i + batch]) * len(order[i : i + batch]) for i in range(0, len(order), batch))
        ratios.append(padded / sum(order))
    return statistics.mean(ratios)


# ---------------------------------------------------------------------------------------------- models


def make_checkpoints(models: Sequence[str], work: Path) -> dict[str, Path]:
    """One tiny checkpoint (seed 0) per model spec name in ``work``; ``tiny_qwen3`` gets a 4096-position config
    (the longest samples here are 3072 tokens; its default is 1024)."""
    out: dict[str, Path] = {}
    plugins = None
    for name in dict.fromkeys(models):
        path = work / f"tiny-{name}"
        if not (path / "config.json").exists():
            if name == "tiny_qwen3":
                from swiftcore_testing import make_tiny_qwen3

                make_tiny_qwen3(path)
                config = json.loads((path / "config.json").read_text())
                config["max_position_embeddings"] = 4096
                (path / "config.json").write_text(json.dumps(config, indent=2) + "\n")
            else:
                from swiftcore_tiny import make_tiny

                from swiftcore import load_plugins

                plugins = plugins or load_plugins(env={})
                make_tiny(plugins.registry.get("model", name), path, seed=0)
        out[name] = path
    return out


def _plugins(family: str) -> Any:
    """Every installed plugin (for ``qwen3`` also ``swiftcore_testing.engines``, which provides ``tiny_qwen3``)."""
    if family == "qwen3":
        from swiftcore_testing import plugins_with_tiny_qwen3

        return plugins_with_tiny_qwen3()
    from swiftcore import load_plugins

    return load_plugins(env={})


# ---------------------------------------------------------------------------------------------- encode


def encode_scaling(templates: Sequence[str], turns: Sequence[int], runs: int, work: Path) -> dict[str, Any]:
    """µs/sample of ``encode_batch`` and of the floor for each template and number of turns."""
    from swiftcore.models import load_tokenizer
    from swiftcore.template import get_template

    checkpoints = make_checkpoints([TEMPLATE_MODELS[t] for t in templates], work)
    out: dict[str, Any] = {}
    for name in templates:
        plugins = _plugins("qwen3" if name == "qwen3" else name)
        tpl = get_template(name, plugins)
        tok = load_tokenizer(checkpoints[TEMPLATE_MODELS[name]])
        backend = tok.backend_tokenizer
        points = []
        for k in turns:
            n = max(64, 2048 // k)
            records = turn_corpus(n, k, seed=0)
            texts = [tpl.render(r) for r in records]
            tokens = sum(len(e.ids) for e in backend.encode_batch(texts, add_special_tokens=False)) / n
            times: dict[str, list[tuple[float, float]]] = {"swiftcore": [], "floor": []}
            for r in range(runs):
                pair = {
                    "swiftcore": lambda records=records, tpl=tpl, tok=tok: tpl.encode_batch(tok, records),
                    "floor": lambda texts=texts, be=backend: [
                        e.ids for e in be.encode_batch(texts, add_special_tokens=False)
                    ],
                }
                for side in ("swiftcore", "floor") if r % 2 == 0 else ("floor", "swiftcore"):
                    times[side].append(timed(pair[side]))
            us = {
                s: {"wall": [w * 1e6 / n for w, _ in v], "cpu": [c * 1e6 / n for _, c in v]} for s, v in times.items()
            }
            points.append(
                {
                    "turns": k,
                    "n": n,
                    "tokens_per_sample": round(tokens, 1),
                    "chars_per_sample": round(sum(map(len, texts)) / n, 1),
                    "us_per_sample": {s: {m: summarize(v) for m, v in d.items()} for s, d in us.items()},
                    "ratio_wall": pair_ratio(us["swiftcore"]["wall"], us["floor"]["wall"]),
                    "ratio_cpu": pair_ratio(us["swiftcore"]["cpu"], us["floor"]["cpu"]),
                }
            )
            print(
                f"encode {name:12s} {k:3d} turns  {tokens:7.0f} tok  swiftcore "
                f"{points[-1]['us_per_sample']['swiftcore']['wall']['median']:9.1f} µs  floor "
                f"{points[-1]['us_per_sample']['floor']['wall']['median']:9.1f} µs  ratio "
                f"{points[-1]['ratio_wall']['median']:.2f}x",
                flush=True,
            )
        out[name] = points
    return out


# ---------------------------------------------------------------------------------------------- train


def _release_memory() -> None:
    """Collect garbage and hand freed heap back to the OS (glibc ``malloc_trim``), so that a run's RSS does not
    start with what the allocator kept from the run before it."""
    import ctypes

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


class _PeakRss:
    """This process's resident memory at the start and its peak meanwhile (sampled every 10 ms)."""

    def __enter__(self) -> _PeakRss:
        import psutil

        self._proc = psutil.Process()
        self.before = self.peak = self._proc.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, self._proc.memory_info().rss)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._proc.memory_info().rss)


def _train_config(model: Path, data: Path, out: Path, length: int, packed: bool, steps: int, batch: int) -> Any:
    from swiftcore_train import TrainConfig

    return TrainConfig(
        model=str(model),
        dataset=(str(data),),
        output_dir=str(out),
        tuner="lora",
        lora_rank=8,
        lora_alpha=32,
        learning_rate=1e-4,
        max_steps=steps,
        batch_size=1 if packed else batch,
        max_length=batch * length if packed else 2 * length,
        packing=packed,
        logging_steps=steps,
        save_steps=100_000,
        seed=42,
        plot=False,
    )


def _one_run(
    plugins: Any, model: Path, data: Path, out: Path, length: int, packed: bool, steps: int, batch: int
) -> dict[str, Any]:
    """One ``run_training`` call; tokens/s from its ``logs.jsonl``, peak RSS from :class:`_PeakRss`."""
    import shutil

    from swiftcore_train import run_training

    shutil.rmtree(out, ignore_errors=True)
    _release_memory()
    with _PeakRss() as rss:
        run_training(_train_config(model, data, out, length, packed, steps, batch), plugins)
    rows = [json.loads(line) for line in (out / "logs.jsonl").read_text().splitlines() if line.strip()]
    final = next(r for r in reversed(rows) if "train_runtime" in r)
    shutil.rmtree(out, ignore_errors=True)
    tokens, runtime = int(final["num_input_tokens_seen"]), float(final["train_runtime"])
    return {
        "tokens": tokens,
        "train_runtime": runtime,
        "tokens_per_s": tokens / runtime,
        "steps": int(final["step"]),
        "peak_rss_mb": rss.peak / 2**20,
        "rss_growth_mb": (rss.peak - rss.before) / 2**20,
    }


def profile_step(plugins: Any, model_dir: Path, rows: list[dict], batch: int, length: int) -> dict[str, Any]:
    """Forward + backward of the same ``batch`` samples padded and packed (the LoRA model as trained): wall
    seconds of one step each after a warm-up step each, then ``torch.profiler``'s top operators by self CPU
    time of one more step each (kept short: at L=2048 a padded step takes seconds)."""
    import torch
    from swiftcore_data import PaddingCollator, PaddingFreeCollator, use_packed_attention
    from swiftcore_train import apply_tuner, load_template

    from swiftcore.api.models import load_model, resolve_model_spec

    cfg = _train_config(model_dir, model_dir, model_dir, length, True, 1, batch)
    spec = resolve_model_spec(str(model_dir), plugins)
    _, tpl, tok = load_template(cfg, spec, plugins)
    samples = [{"input_ids": e.input_ids, "labels": e.labels} for e in (tpl.encode(tok, r) for r in rows[:batch])]
    model = load_model(spec, str(model_dir), plugins, torch_dtype="float32")
    use_packed_attention(model)
    model = apply_tuner(model, spec, cfg).train()
    batches = {
        "padded": PaddingCollator(pad_token_id=tok.pad_token_id or 0)(samples),
        "packed": {k: v for k, v in PaddingFreeCollator()(samples).items() if k != "seq_lens"},
    }

    def step(b: dict[str, Any]) -> float:
        model.zero_grad(set_to_none=True)
        start = time.perf_counter()
        model(**b).loss.backward()
        return time.perf_counter() - start

    for b in batches.values():
        step(b)  # warm-up
    out: dict[str, Any] = {
        "length": length,
        "lengths": [len(s["input_ids"]) for s in samples],
        "seconds": {k: step(b) for k, b in batches.items()},
        "top": {},
    }
    for k, b in batches.items():
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            step(b)
        events = prof.key_averages()
        total = sum(e.self_cpu_time_total for e in events)
        top = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:8]
        out["top"][k] = {
            "ops": sum(e.count for e in events),
            "self_cpu_ms": total / 1e3,
            "rows": [{"op": e.key, "calls": e.count, "self_cpu_ms": e.self_cpu_time_total / 1e3} for e in top],
        }
    return out


def profile_lines(prof: dict[str, Any], heading: str) -> list[str]:
    """A :func:`profile_step` result as RESULTS.md lines: ``heading``, the two step times, the operator table."""
    pad, pack = prof["seconds"]["padded"], prof["seconds"]["packed"]
    lines = [
        f"{heading}: one forward + backward of the same {len(prof['lengths'])} samples "
        f"({', '.join(map(str, prof['lengths']))} tokens), padded {pad:.3f} s vs packed {pack:.3f} s (one step each "
        f"after a warm-up, packed/padded time {pack / pad:.2f}x); `torch.profiler`, operators by self CPU time:",
        "",
        "| mode | operator calls | self CPU total (ms) | top operators: self CPU ms (calls) |",
        "| --- | --- | --- | --- |",
    ]
    for mode in ("padded", "packed"):
        top = prof["top"][mode]
        ops = "; ".join(f"`{r['op']}` {r['self_cpu_ms']:.1f} ({r['calls']})" for r in top["rows"][:6])
        lines.append(f"| {mode} | {top['ops']} | {top['self_cpu_ms']:.0f} | {ops} |")
    return lines


def _train_child(spec_path: str) -> None:
    """(Child process) every run of one family; writes the result JSON where the spec says."""
    spec = json.loads(Path(spec_path).read_text())
    family, model, work = spec["family"], Path(spec["model"]), Path(spec["work"])
    lengths, runs, steps, batch = spec["lengths"], spec["runs"], spec["steps"], spec["batch_size"]
    import torch

    torch.set_num_threads(1)
    from swiftcore_train import load_template

    from swiftcore.api.models import resolve_model_spec

    plugins = _plugins(family)
    _, tpl, tok = load_template(
        _train_config(model, model, work, 128, False, steps, batch), resolve_model_spec(str(model), plugins), plugins
    )
    from conversations import write_jsonl

    data: dict[int, Path] = {}
    rows_by_length: dict[int, list[dict]] = {}
    points: list[dict[str, Any]] = []
    for length in lengths:
        rows, sizes = length_rows(tpl, tok, length, steps * batch, seed=0)
        rows_by_length[length] = rows
        data[length] = write_jsonl(rows, work / f"{family}-L{length}.jsonl")
        points.append(
            {
                "length": length,
                "samples": len(rows),
                "sample_tokens": summarize(sizes),
                "padded_over_real": expected_padding(sizes, batch),
                "runs": {"padded": [], "packed": []},
            }
        )
    start = time.perf_counter()
    for packed in (False, True):  # warm-up: lazy imports and first-call costs, not recorded
        _one_run(plugins, model, data[lengths[0]], work / "warmup", lengths[0], packed, 2, batch)
    for r in range(runs):
        for i, point in enumerate(points):
            order = ("padded", "packed") if (i + r) % 2 == 0 else ("packed", "padded")
            for mode in order:
                result = _one_run(
                    plugins,
                    model,
                    data[point["length"]],
                    work / f"out-{mode}",
                    point["length"],
                    mode == "packed",
                    steps,
                    batch,
                )
                point["runs"][mode].append(result)
                print(
                    f"train {family} L={point['length']} {mode}: {result['tokens_per_s']:.0f} tokens/s, "
                    f"peak RSS {result['peak_rss_mb']:.0f} MB",
                    flush=True,
                )
    for point in points:
        runs_ = point["runs"]
        point["tokens_per_s"] = {m: summarize([x["tokens_per_s"] for x in v]) for m, v in runs_.items()}
        point["peak_rss_mb"] = {m: summarize([x["peak_rss_mb"] for x in v]) for m, v in runs_.items()}
        point["rss_growth_mb"] = {m: summarize([x["rss_growth_mb"] for x in v]) for m, v in runs_.items()}
        point["ratio_packed_over_padded"] = pair_ratio(
            [x["tokens_per_s"] for x in runs_["packed"]], [x["tokens_per_s"] for x in runs_["padded"]]
        )
    result: dict[str, Any] = {
        "family": family,
        "attention": FAMILIES.get(family, ""),
        "points": points,
        "seconds": round(time.perf_counter() - start, 1),
        "parameters": sum(p.numel() for p in _load_quiet(model, plugins).parameters()),
    }
    worst = min(points, key=lambda p: p["ratio_packed_over_padded"]["median"])
    if spec.get("profile") and worst["ratio_packed_over_padded"]["median"] < PROFILE_BELOW:
        result["profile"] = profile_step(plugins, model, rows_by_length[worst["length"]], batch, worst["length"])
    elif spec.get("profile"):
        result["profile_skipped"] = (
            f"packed/padded >= {PROFILE_BELOW} at every length (worst "
            f"{worst['ratio_packed_over_padded']['median']:.2f}x at L={worst['length']})"
        )
    Path(spec["out"]).write_text(json.dumps(result, indent=1) + "\n")


def _load_quiet(model: Path, plugins: Any) -> Any:
    from swiftcore.api.models import load_model, resolve_model_spec

    return load_model(resolve_model_spec(str(model), plugins), str(model), plugins, torch_dtype="float32")


def train_scaling(
    families: Sequence[str],
    lengths: Sequence[int],
    runs: int,
    steps: int,
    batch: int,
    work: Path,
    profile: bool = False,
) -> dict[str, Any]:
    """Each family's runs in one child process (``OMP_NUM_THREADS=1``); its whole-process peak RSS too."""
    checkpoints = make_checkpoints(["tiny_qwen3" if f == "qwen3" else f for f in families], work)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SWIFTCORE_")},
        "OMP_NUM_THREADS": "1",
        "TQDM_DISABLE": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
    }
    out: dict[str, Any] = {}
    for family in families:
        spec = {
            "family": family,
            "model": str(checkpoints["tiny_qwen3" if family == "qwen3" else family]),
            "work": str(work),
            "lengths": list(lengths),
            "runs": runs,
            "steps": steps,
            "batch_size": batch,
            "profile": profile,
            "out": str(work / f"train-{family}.json"),
        }
        spec_path = work / f"train-{family}.spec.json"
        spec_path.write_text(json.dumps(spec))
        child = run_child(
            [sys.executable, str(Path(__file__).resolve()), "--train-child", str(spec_path)],
            cwd=ROOT,
            env=env,
            timeout=3600,
        )
        print("\n".join(line for line in child.output.splitlines() if line.startswith("train ")), flush=True)
        if child.returncode != 0:
            raise RuntimeError(f"training child for {family} failed (rc {child.returncode}):\n{child.output[-4000:]}")
        out[family] = {
            **json.loads(Path(spec["out"]).read_text()),
            "process_peak_rss_mb": child.peak_rss_mb,
            "process_wall_s": round(child.seconds, 1),
        }
    return out


# ---------------------------------------------------------------------------------------------- run, plot, render


def run(
    runs: int = 3,
    parts: Sequence[str] = ("encode", "train"),
    templates: Sequence[str] = TEMPLATES,
    turns: Sequence[int] = TURNS,
    families: Sequence[str] = tuple(FAMILIES),
    lengths: Sequence[int] = LENGTHS,
    steps: int = 8,
    batch_size: int = 4,
    profile: bool = True,
    train_runs: int | None = None,
    command: str | None = None,
    work: Path | None = None,
) -> dict[str, Any]:
    """Measure the figure; return the raw result (also written to ``bench/raw/scaling.json`` by :func:`main`)."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="swiftcore-bench-scaling-") as tmp:
        where = work or Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        raw: dict[str, Any] = {
            "machine": machine(),
            "command": command or "python bench/scaling.py",
            "runs": runs,
            "train_runs": train_runs or runs,
            "floor": FLOOR,
        }
        if "encode" in parts:
            raw["encode"] = {"turns": list(turns), "templates": encode_scaling(templates, turns, runs, where)}
        if "train" in parts:
            raw["train"] = {
                "lengths": list(lengths),
                "steps": steps,
                "batch_size": batch_size,
                "families": train_scaling(families, lengths, train_runs or runs, steps, batch_size, where, profile),
            }
    raw["seconds"] = round(time.perf_counter() - start, 1)
    return raw


def plot(raw: dict[str, Any]) -> list[Path]:
    """Write ``bench/scaling_encode.png`` and/or ``bench/scaling_train.png``; return the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullLocator

    written = []
    if "encode" in raw:
        fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 5))
        for i, (name, points) in enumerate(raw["encode"]["templates"].items()):
            color = f"C{i}"
            x = [p["turns"] for p in points]
            ax.plot(
                x,
                [p["us_per_sample"]["swiftcore"]["wall"]["median"] for p in points],
                "o-",
                color=color,
                label=f"{name} encode_batch",
            )
            ax.plot(
                x,
                [p["us_per_sample"]["floor"]["wall"]["median"] for p in points],
                "--",
                color=color,
                alpha=0.7,
                label=f"{name} floor",
            )
            bx.plot(x, [p["ratio_wall"]["median"] for p in points], "o-", color=color, label=f"{name} wall")
            bx.plot(x, [p["ratio_cpu"]["median"] for p in points], ":", color=color, alpha=0.7, label=f"{name} cpu")
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="user/assistant turns per conversation",
            ylabel="µs per sample (wall, median)",
            title="Encode time vs conversation length",
        )
        ax.set_xticks(raw["encode"]["turns"], [str(t) for t in raw["encode"]["turns"]], minor=False)
        ax.xaxis.set_minor_locator(NullLocator())
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
        bx.axhline(1.0, color="grey", lw=0.8)
        bx.set(
            xscale="log",
            xlabel="user/assistant turns per conversation",
            ylabel="swiftcore / floor (median of per-run ratios)",
            title="Overhead over the bare tokenizer",
        )
        bx.set_xticks(raw["encode"]["turns"], [str(t) for t in raw["encode"]["turns"]])
        bx.xaxis.set_minor_locator(NullLocator())
        bx.grid(True, alpha=0.3)
        bx.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        fig.savefig(ENCODE_PNG, dpi=110)
        plt.close(fig)
        written.append(ENCODE_PNG)
    if "train" in raw:
        fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 5))
        lengths = raw["train"]["lengths"]
        for i, (family, res) in enumerate(raw["train"]["families"].items()):
            color = f"C{i}"
            x = [p["length"] for p in res["points"]]
            for mode, style in (("packed", "o-"), ("padded", "s--")):
                ax.plot(
                    x,
                    [p["tokens_per_s"][mode]["median"] for p in res["points"]],
                    style,
                    color=color,
                    label=f"{family} {mode}",
                )
            ratio = [p["ratio_packed_over_padded"] for p in res["points"]]
            bx.errorbar(
                x,
                [r["median"] for r in ratio],
                yerr=[[r["median"] - r["min"] for r in ratio], [r["max"] - r["median"] for r in ratio]],
                fmt="o-",
                color=color,
                capsize=3,
                label=f"{family} (bars: min–max of the runs)",
            )
        for axis, label, title in (
            (ax, "real tokens/s (median)", "Train tokens/s vs sequence length"),
            (bx, "packed / padded tokens/s", "Packing's gain"),
        ):
            axis.set(
                xscale="log", xlabel="sample length L (tokens; samples drawn in [L/2, 3L/2])", ylabel=label, title=title
            )
            axis.set_xticks(lengths, [str(v) for v in lengths])
            axis.xaxis.set_minor_locator(NullLocator())
            axis.grid(True, alpha=0.3)
            axis.legend(fontsize=8)
        ax.set_yscale("log")
        bx.axhline(1.0, color="grey", lw=0.8)
        fig.tight_layout()
        fig.savefig(TRAIN_PNG, dpi=110)
        plt.close(fig)
        written.append(TRAIN_PNG)
    return written


def _rng(s: dict[str, float], fmt: str = ".1f") -> str:
    return f"{s['median']:{fmt}} ({s['min']:{fmt}}–{s['max']:{fmt}})"


def _fit(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Least-squares line ``y = a + b*x``; returns ``(a, b)``."""
    fit = statistics.linear_regression(x, y)
    return fit.intercept, fit.slope


def _trend(values: Sequence[float]) -> str:
    """'grows', 'shrinks' or 'stays about constant' from the first to the last value (10% band)."""
    first, last = values[0], values[-1]
    if last > first * 1.1:
        return "grows"
    if last < first / 1.1:
        return "shrinks"
    return "stays about constant"


def _train_reading(tr: dict[str, Any]) -> list[str]:
    """What the train tables say, computed from them, and what the code does (quoted from its docstrings)."""
    out = ["Reading (computed from the tables above):", ""]
    for family, res in tr["families"].items():
        pts = res["points"]
        ratios = {p["length"]: p["ratio_packed_over_padded"]["median"] for p in pts}
        wins = [str(v) for v, r in ratios.items() if r >= 1.05]
        losses = [str(v) for v, r in ratios.items() if r <= 1 / 1.05]
        even = [str(v) for v, r in ratios.items() if 1 / 1.05 < r < 1.05]
        above = [str(p["length"]) for p in pts if ratios[p["length"]] > p["padded_over_real"] * 1.05]
        below = [str(p["length"]) for p in pts if ratios[p["length"]] < p["padded_over_real"] / 1.05]
        first, last = pts[0], pts[-1]
        rss = last["peak_rss_mb"]
        slope = {
            m: last["tokens_per_s"][m]["median"] / first["tokens_per_s"][m]["median"] for m in ("padded", "packed")
        }
        parts = [f"packed >= 1.05x padded at L = {', '.join(wins)}" if wins else "packed never >= 1.05x padded"]
        if losses:
            parts.append(f"<= 1/1.05x (packed loses) at L = {', '.join(losses)}")
        if even:
            parts.append(f"within 5% at L = {', '.join(even)}")
        versus = [f"more gain than that at L = {', '.join(above)}"] if above else []
        versus += [f"less at L = {', '.join(below)}"] if below else []
        out.append(
            f"- {family}: {'; '.join(parts)}. From L={first['length']} to L={last['length']} padded tokens/s changes "
            f"{slope['padded']:.2f}x and packed {slope['packed']:.2f}x (padded/real tokens of the data "
            f"{first['padded_over_real']:.2f} -> {last['padded_over_real']:.2f}). Peak RSS at L={last['length']}: "
            f"packed {rss['packed']['median']:.0f} MB vs padded {rss['padded']['median']:.0f} MB "
            f"({rss['packed']['median'] / rss['padded']['median']:.2f}x). Against the padding it removes "
            f"(packed/padded = padded/real if a token cost the same either way): "
            f"{'; '.join(versus) or 'within 5% of that at every L'}."
        )
        prof = res.get("profile")
        if prof:
            pad, pack = prof["top"]["padded"], prof["top"]["packed"]
            real, padded = sum(prof["lengths"]), len(prof["lengths"]) * max(prof["lengths"])
            step = prof["seconds"]["packed"] / prof["seconds"]["padded"]
            out.append(
                f"  - profile at L={prof['length']}: the batch's real tokens are {real / padded:.0%} of its padded "
                f"tokens ({real} of {padded}); the packed step took {step:.2f}x the padded step's time; packed "
                f"launches {pack['ops'] / pad['ops']:.1f}x the operators of padded ({pack['ops']} vs {pad['ops']}) "
                f"for {pack['self_cpu_ms'] / pad['self_cpu_ms']:.2f}x the operators' self CPU time; top operator "
                f"padded `{pad['rows'][0]['op']}`, packed `{pack['rows'][0]['op']}`."
            )
    widest = max(
        ((f, p) for f, res in tr["families"].items() for p in res["points"]),
        key=lambda fp: fp[1]["ratio_packed_over_padded"]["max"] / fp[1]["ratio_packed_over_padded"]["min"],
    )
    r = widest[1]["ratio_packed_over_padded"]
    out += [
        "",
        f"Noise: the machine is shared, so single runs swing; the widest spread of packed/padded between runs of one "
        f"point is {widest[0]} at L={widest[1]['length']}, {r['min']:.2f}–{r['max']:.2f}x (every range is in the "
        "tables and in the plot's bars).",
    ]
    out += [
        "",
        "What the code does on a CPU (quoted, not measured here): Qwen3.5's gated DeltaNet layers get a packed row "
        'cut at the sample boundaries, and "on a CPU each sample runs through the original forward alone, '
        'elsewhere they are re-laid as a right-padded batch" (`model_plugins/qwen3_5/src/swiftcore_plugin_qwen3_5/'
        "packing.py`; figure 5's note describes the right-padded re-lay, which is the non-CPU path), so a packed "
        "step runs those layers once per sample instead of once per batch. The softmax-attention layers of a packed "
        'row run "torch\'s sdpa on each sample\'s span with `is_causal=True`", which "costs `sum(length²)`, never '
        'more than either, and needs no mask" (`plugins/data/src/swiftcore_data/packed_attention.py`); a padded '
        "batch goes to transformers' sdpa with the padding mask.",
    ]
    return out


def render(raw: dict[str, Any]) -> str:
    """The Markdown section of figure 13 (pure: depends on ``raw`` only)."""
    m = raw["machine"]
    lines = [
        BEGIN,
        "",
        "## 13. Scaling: encode time vs conversation length, train tokens/s vs sequence length",
        "",
        f"`{raw['command']}`, {m['date']}, {raw['seconds']:.0f} s, {m['cpu']}, {m['cores']} cores, "
        f"{m['memory_gb']} GB (shared with other jobs). Plots: `bench/scaling_encode.png`, "
        "`bench/scaling_train.png`; raw JSON: `bench/raw/scaling.json`.",
    ]
    if "encode" in raw:
        enc = raw["encode"]
        names = list(enc["templates"])
        lines += [
            "",
            "### Encode time vs conversation length",
            "",
            f"Chats of exactly N user/assistant turns (the reference corpus' Q/A pairs; a system prompt in "
            f"half the rows), `Template.encode_batch` vs the floor ({raw['floor']}) over the same rows' "
            f"renderings, {raw['runs']} alternating runs, `max(64, 2048 // N)` rows a point, tiny-checkpoint "
            "tokenizers. µs/sample, wall, median; ratio = median of the per-run ratios swiftcore / floor "
            "(cpu ratio in brackets).",
            "",
            "| template | " + " | ".join(f"{t} turns" for t in enc["turns"]) + " |",
            "| --- |" + " --- |" * len(enc["turns"]),
        ]
        for name in names:
            pts = enc["templates"][name]
            lines.append(f"| {name} tokens/sample | " + " | ".join(f"{p['tokens_per_sample']:.0f}" for p in pts) + " |")
            lines.append(
                f"| {name} swiftcore | "
                + " | ".join(f"{p['us_per_sample']['swiftcore']['wall']['median']:.0f}" for p in pts)
                + " |"
            )
            lines.append(
                f"| {name} floor | "
                + " | ".join(f"{p['us_per_sample']['floor']['wall']['median']:.0f}" for p in pts)
                + " |"
            )
            lines.append(
                f"| **{name} swiftcore / floor** | "
                + " | ".join(f"**{p['ratio_wall']['median']:.2f}x** ({p['ratio_cpu']['median']:.2f}x)" for p in pts)
                + " |"
            )
        spread = max(
            ((n, p) for n in names for p in enc["templates"][n]),
            key=lambda np_: np_[1]["ratio_wall"]["max"] / np_[1]["ratio_wall"]["min"],
        )
        calls = [
            p["n"] * p["us_per_sample"][side]["wall"]["median"] / 1e6
            for n in names
            for p in enc["templates"][n]
            for side in ("swiftcore", "floor")
        ]
        jumps = {
            kind: statistics.mean(
                abs(a[f"ratio_{kind}"]["median"] - b[f"ratio_{kind}"]["median"])
                for n in names
                for a, b in zip(enc["templates"][n], enc["templates"][n][1:])
            )
            for kind in ("wall", "cpu")
        }
        first = statistics.median(enc["templates"][n][0]["ratio_wall"]["median"] for n in names)
        last = statistics.median(enc["templates"][n][-1]["ratio_wall"]["median"] for n in names)
        lines += [
            "",
            f"Across the {len(names)} templates the median swiftcore / floor ratio (wall) is {first:.2f}x at "
            f"{enc['turns'][0]} turn(s) and {last:.2f}x at {enc['turns'][-1]} turns. Each timed call lasts "
            f"{min(calls):.2f}–{max(calls):.2f} s (medians) on a shared machine, so single points swing (widest "
            "spread of the per-run wall ratios: "
            f"{spread[0]} at {spread[1]['turns']} turns, {spread[1]['ratio_wall']['min']:.2f}–"
            f"{spread[1]['ratio_wall']['max']:.2f}x); from one length to the next the median ratio moves by "
            f"{jumps['wall']:.2f} on average in wall time and {jumps['cpu']:.2f} in cpu time (which a descheduled "
            "process does not inflate).",
        ]
        lines += [
            "",
            "How the overhead scales (first to last length; 'extra' = µs/sample of swiftcore minus the floor's, "
            "wall, per turn):",
            "",
        ]
        for name in names:
            pts = enc["templates"][name]
            ratios = [p["ratio_wall"]["median"] for p in pts]
            extra = [
                (p["us_per_sample"]["swiftcore"]["wall"]["median"] - p["us_per_sample"]["floor"]["wall"]["median"])
                / p["turns"]
                for p in pts
            ]
            cpu = [p["ratio_cpu"]["median"] for p in pts]
            turns = [p["turns"] for p in pts]
            ours = _fit(turns, [p["us_per_sample"]["swiftcore"]["wall"]["median"] for p in pts])
            floor = _fit(turns, [p["us_per_sample"]["floor"]["wall"]["median"] for p in pts])
            lines.append(
                f"- {name}: ratio {ratios[0]:.2f}x at {pts[0]['turns']} turn(s) -> {ratios[-1]:.2f}x at "
                f"{pts[-1]['turns']} turns ({_trend(ratios)}; range {min(ratios):.2f}–{max(ratios):.2f}x); cpu "
                f"ratio {cpu[0]:.2f}x -> {cpu[-1]:.2f}x ({_trend(cpu)}); extra µs per turn {extra[0]:.1f} -> "
                f"{extra[-1]:.1f}; least-squares lines swiftcore "
                f"{ours[0]:.0f} + {ours[1]:.1f}·turns µs, floor {floor[0]:.0f} + {floor[1]:.1f}·turns µs (slope ratio "
                f"{ours[1] / floor[1]:.2f}x: where the ratio heads as chats grow)"
            )
    if "train" in raw:
        tr = raw["train"]
        b, steps = tr["batch_size"], tr["steps"]
        lines += [
            "",
            "### Train tokens/s vs sequence length, packed vs padded",
            "",
            f"`swiftcore train`'s code (`run_training`, what the CLI calls), LoRA r=8 alpha=32 on all linear "
            f"layers, lr 1e-4, fp32, CPU, `OMP_NUM_THREADS=1`, {steps} steps a run, {raw['train_runs']} "
            f"run(s) of each mode per point (packed and padded alternating, the order flipping per point; one "
            f"warm-up run first). For each L, {steps * b} chats whose encoded lengths are drawn uniformly in "
            f"[L/2, 3L/2]. Padded: `--batch-size {b} --max-length 2L`; packed: `--packing --batch-size 1 "
            f"--max-length {b}L` (one row of about {b} samples a step), so both train about the same real "
            "tokens a step. tokens/s = real tokens (`num_input_tokens_seen`, non-padding) / the trainer's "
            "`train_runtime`. Peak RSS: the family's training process (all its runs share one, so the "
            "libraries are paid once), sampled during the run; growth = peak minus the RSS at the run's "
            "start (after `gc.collect()` and glibc's `malloc_trim(0)`). padded / real = padded tokens over "
            f"real tokens of random batches of {b} of this data (mean of 200 shuffles).",
        ]
        for family, res in tr["families"].items():
            lines += [
                "",
                f"**{family}** ({res['attention']}; {res['parameters'] / 1e6:.2f} M parameters; process "
                f"peak RSS {res['process_peak_rss_mb']:.0f} MB, {res['process_wall_s']:.0f} s)",
                "",
                "| L | sample tokens median (min–max) | padded / real | padded tokens/s | packed tokens/s | "
                "packed / padded | peak RSS padded / packed (MB) | RSS growth padded / packed (MB) |",
                "| --- | --- | --- | --- | --- | --- | --- | --- |",
            ]
            for p in res["points"]:
                t, rss, g = p["tokens_per_s"], p["peak_rss_mb"], p["rss_growth_mb"]
                lines.append(
                    f"| {p['length']} | {_rng(p['sample_tokens'], '.0f')} | {p['padded_over_real']:.2f} | "
                    f"{_rng(t['padded'], '.0f')} | {_rng(t['packed'], '.0f')} | "
                    f"**{p['ratio_packed_over_padded']['median']:.2f}x** | "
                    f"{rss['padded']['median']:.0f} / {rss['packed']['median']:.0f} | "
                    f"{g['padded']['median']:.0f} / {g['packed']['median']:.0f} |"
                )
            prof = res.get("profile")
            if prof:
                lines += ["", *profile_lines(prof, f"Profile at L={prof['length']} (where packed did worst)")]
            elif res.get("profile_skipped"):
                lines += ["", f"Not profiled: {res['profile_skipped']}."]
        lines += ["", *_train_reading(tr)]
    lines += ["", END]
    return "\n".join(lines)


def write_section(raw: dict[str, Any]) -> Path:
    """Replace (or append) figure 13's section of RESULTS.md."""
    return replace_section(render(raw), BEGIN, END)


def main() -> None:
    """Run the figure, write the raw JSON and the plots (and the RESULTS.md section unless ``--no-section``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="alternating runs per encode point")
    parser.add_argument("--train-runs", type=int, help="runs of each mode per train point (default: --runs)")
    parser.add_argument("--parts", default="encode,train")
    parser.add_argument("--templates", default=",".join(TEMPLATES))
    parser.add_argument("--turns", default=",".join(map(str, TURNS)))
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--profile", action="store_true", help="profile one step where packed does worst")
    parser.add_argument("--no-section", action="store_true", help="leave RESULTS.md alone")
    parser.add_argument("--work", type=Path, help="scratch directory (default: a temporary one)")
    parser.add_argument("--train-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.train_child:
        _train_child(args.train_child)
        return
    raw = run(
        args.runs,
        tuple(args.parts.split(",")),
        tuple(args.templates.split(",")),
        tuple(int(t) for t in args.turns.split(",")),
        tuple(args.families.split(",")),
        tuple(int(v) for v in args.lengths.split(",")),
        args.steps,
        args.batch_size,
        args.profile,
        args.train_runs,
        command="python " + " ".join(["bench/scaling.py", *sys.argv[1:]]),
        work=args.work,
    )
    print(write_raw("scaling", raw))
    for path in plot(raw):
        print(path)
    if not args.no_section:
        print(write_section(raw))


if __name__ == "__main__":
    main()
