"""Training at a size users train: a ~145 M-parameter Qwen3.5, chats of realistic lengths, packed vs padded vs TRL.

**Model.** ``swiftcore make-tiny qwen3_5`` (the family's config class, chat template and special tokens) with its
text model scaled up and re-initialised at random: Qwen3.5's real vocabulary of 248,320 (embeddings tied to keep the
size in range), hidden 512, intermediate 2048, 4 layers in the family's pattern (3 gated-delta linear-attention
layers, 1 full-attention layer), 8 heads / 2 kv of head_dim 128: 145 M parameters, 127 M of them the embedding. The
tiny tokenizer has 512 tokens (a BPE with the family's special tokens), so the embedding is padded to the real
248,320 rows: every token id the data uses is < 512, but the output head, the loss and the optimizer pay for the
full vocabulary, which dominates the compute at this size. The tiny vision tower stays (unused by text chats).
``--dtype bfloat16`` (autocast) is an option; float32, swiftcore's default, is the default: on the loaded 2-core
machine a bf16 forward + backward of 1 k tokens ran at the same ~15 tokens/s as float32.

**Lengths.** Chat lengths are drawn from a log-normal fitted to UltraChat's published mean dialogue length, 1,467
tokens (Ding et al. 2023, "Enhancing Chat Language Models by Scaling High-quality Instructional Conversations",
arXiv:2305.14233, table 1): the paper gives the mean only, so the spread is our choice (sigma 0.8, a median of 1,065
tokens), clipped to 256-4,096 tokens: most chats are a few hundred to two thousand tokens and a few reach 4 k. A
log-normal is the usual shape of chat and document lengths (ShareGPT's published histograms are right-skewed the
same way). Each chat gets 1-6 turns; its text is the reference corpus' pieces (:mod:`conversations`), an assistant
turn joining answers until the chat reaches its drawn length in the model's own tokens.

**Figures** (each side by side in one run, alternating, peak RSS of the whole process tree):

- ``swiftcore train`` packed vs padded, LoRA and full: real (non-pad) tokens/s over the trainer's own runtime;
- plain TRL 1.16 ``SFTTrainer`` on the same model and chats, with its own packing (``packing=True``, bfd) and
  ``padding_free=True`` (LoRA, the same r/alpha); TRL's loss covers every token of a chat (swiftcore's the
  assistant's), and it computes the full-vocabulary logits;
- the peak RSS of one packed LoRA step against the row length (``--lengths``, 512-4 k by default; add 8192 where
  time allows) with the chunked loss (the default) and with ``--loss-chunk-size 0`` (full-vocabulary logits), and
  the longest row that fits a memory cap (16 GB): measured when a point reaches it, else a least-squares line
  through the points (peak MB against the step's real tokens), labelled extrapolated; a point whose predicted
  peak exceeds 80% of the available memory is skipped, not run, on a shared machine;
- with ``--profile``: the middle memory point (chunked) under the standard library's cProfile: the cumulative
  seconds of the step's parts (model forward, the chunked loss, backward, optimizer, the linear-attention fallbacks)
  and the top functions by own time (torch's C++ backward shows as one call).

Usage: ``python bench/realistic_train.py [--quick]``; ``--quick`` (fewer chats, shorter rows, one round) checks
it in minutes. Figures go to stdout and ``bench/raw/realistic_train.json`` (under ``quick`` or ``full``, the latest
run of each). Indicative on a shared machine: the load average before and after is recorded.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import RAW, ROOT, machine, pair_ratio, run_child, summarize, write_raw
from conversations import _pieces, write_jsonl

__all__ = ["TEXT_CONFIG", "chat_lengths", "make_model", "realistic_chats", "swiftcore_run", "trl_run"]

SWIFTCORE = Path(sys.executable).parent / "swiftcore"
#: The text model: Qwen3.5's vocabulary and layer pattern, width and depth cut to ~145 M parameters.
TEXT_CONFIG = {"vocab_size": 248320, "hidden_size": 512, "intermediate_size": 2048, "num_hidden_layers": 4,
               "layer_types": ["linear_attention"] * 3 + ["full_attention"], "num_attention_heads": 8,
               "num_key_value_heads": 2, "head_dim": 128, "linear_num_key_heads": 4, "linear_num_value_heads": 8,
               "linear_key_head_dim": 64, "linear_value_head_dim": 64, "tie_word_embeddings": True,
               "max_position_embeddings": 32768}  # fmt: skip
#: UltraChat's mean dialogue length (arXiv:2305.14233, table 1); the log-normal's spread and clip are ours.
MEAN_TOKENS, SIGMA, MIN_TOKENS, MAX_TOKENS = 1467, 0.8, 256, 4096
CAP_GB = 16.0
LORA = {"rank": 8, "alpha": 32, "learning_rate": 1e-4}


def make_model(out: Path) -> Path:
    """Write the scaled, randomly initialised Qwen3.5 (:data:`TEXT_CONFIG`) to ``out`` once; return ``out``."""
    if (out / "model.safetensors").exists():
        return out
    import torch
    import transformers

    tiny = out.parent / "tiny-qwen3_5"
    if not (tiny / "config.json").exists():
        subprocess.run([str(SWIFTCORE), "make-tiny", "qwen3_5", str(tiny), "--force"], check=True,
                       stdout=subprocess.DEVNULL)  # fmt: skip
    config = transformers.AutoConfig.from_pretrained(tiny)
    for key, value in TEXT_CONFIG.items():
        setattr(config.text_config, key, value)
    config.tie_word_embeddings = True
    torch.manual_seed(0)
    model = transformers.Qwen3_5ForConditionalGeneration(config)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    for path in tiny.iterdir():
        if path.suffix != ".safetensors" and path.name not in ("config.json",):
            shutil.copy(path, out / path.name)
    return out


def chat_lengths(n: int, seed: int | None = 0, *, mean: float = MEAN_TOKENS, sigma: float = SIGMA,
                 lo: int = MIN_TOKENS, hi: int = MAX_TOKENS) -> list[int]:  # fmt: skip
    """``n`` chat lengths (tokens) of a log-normal of this ``mean`` and ``sigma``, clipped to ``[lo, hi]``: random
    draws, or with ``seed=None`` its ``(i + 0.5) / n`` quantiles (a few chats that still span the distribution),
    interleaved short/long so that padded batches mix lengths as random ones do."""
    import statistics

    mu = math.log(mean) - sigma**2 / 2
    if seed is None:
        dist = statistics.NormalDist(mu, sigma)
        raw = [math.exp(dist.inv_cdf((i + 0.5) / n)) for i in range(n)]
        short, long = raw[: n // 2], raw[n - n // 2 :][::-1]
        raw = [x for pair in zip(short, long) for x in pair] + raw[n // 2 : n - n // 2]
    else:
        rng = random.Random(seed)
        raw = [rng.lognormvariate(mu, sigma) for _ in range(n)]
    return [min(hi, max(lo, round(x))) for x in raw]


def realistic_chats(lengths: list[int], tokenizer: Any, seed: int = 0) -> list[dict[str, Any]]:
    """One chat per target length: 1-6 turns of the reference corpus' pieces, the assistant turns joining answers
    until the rendered chat (``tokenizer``'s chat template) reaches its target; each chat ends at or just past it."""
    rng = random.Random(seed)
    pieces = _pieces()
    chats = []
    for i, target in enumerate(lengths):
        turns = rng.randint(1, 6)
        messages: list[dict[str, Any]] = []
        if rng.random() < 0.5:
            messages.append({"role": "system", "content": rng.choice(pieces["systems"])})
        size = 0
        for t in range(turns):
            q, a = rng.choice(pieces["pairs"])
            messages += [{"role": "user", "content": f"{q} ({i}.{t})"}, {"role": "assistant", "content": a}]
            goal = target * (t + 1) / turns
            size = _length(messages, tokenizer)
            while size < goal:
                messages[-1]["content"] += "\n\n" + rng.choice(pieces["pairs"])[1]
                size = _length(messages, tokenizer)
        chats.append({"messages": messages})
    return chats


def _length(messages: list[dict[str, Any]], tokenizer: Any) -> int:
    return len(tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False))


def _logs(out_dir: Path) -> dict[str, Any]:
    rows = [json.loads(line) for line in (out_dir / "logs.jsonl").read_text().splitlines() if line.strip()]
    final = next(r for r in reversed(rows) if "train_runtime" in r)
    return {
        "train_runtime": float(final["train_runtime"]),
        "tokens": int(final["num_input_tokens_seen"]),
        "steps": int(final["step"]),
    }


def swiftcore_run(model: Path, data: Path, out_dir: Path, *, tuner: str, packing: bool, max_length: int,
                  batch_size: int, dtype: str, max_steps: int = -1, loss_chunk: int | None = None,
                  profile: Path | None = None, truncation: str = "error") -> dict[str, Any]:  # fmt: skip
    """One ``swiftcore train`` epoch (or ``max_steps``) in a child; tokens/s over the trainer's runtime, peak RSS.
    ``profile``: run it under cProfile writing its stats there (slower; RSS as usual); ``truncation``: what
    to do with a chat longer than ``max_length`` (``--truncation``)."""
    shutil.rmtree(out_dir, ignore_errors=True)
    argv = [str(SWIFTCORE), "train", "--model", str(model), "--dataset", str(data), "--output-dir", str(out_dir),
            "--tuner", tuner, "--lora-rank", str(LORA["rank"]), "--lora-alpha", str(LORA["alpha"]),
            "--batch-size", str(batch_size), "--max-length", str(max_length), "--dtype", dtype,
            "--learning-rate", str(LORA["learning_rate"]), "--num-train-epochs", "1", "--max-steps", str(max_steps),
            "--logging-steps", "1", "--save-steps", "100000", "--no-plot", "--seed", "42",
            "--packing" if packing else "--no-packing", "--truncation", truncation]  # fmt: skip
    if loss_chunk is not None:
        argv += ["--loss-chunk-size", str(loss_chunk)]
    if profile is not None:
        argv = [sys.executable, "-m", "cProfile", "-o", str(profile), *argv]
    cpu = _children_cpu()
    child = run_child(argv, cwd=ROOT, timeout=3600)
    cpu = _children_cpu() - cpu
    if child.returncode != 0:
        raise RuntimeError(f"swiftcore train failed (rc {child.returncode}):\n{child.output[-3000:]}")
    log = _logs(out_dir)
    shutil.rmtree(out_dir, ignore_errors=True)  # a full run's checkpoint is 0.6 GB
    return {
        **log,
        "tokens_per_s": log["tokens"] / log["train_runtime"],
        "wall_s": round(child.seconds, 1),
        "cpu_s": round(cpu, 1),
        "peak_rss_mb": round(child.peak_rss_mb),
    }


def trl_run(model: Path, data: Path, out_dir: Path, *, mode: str, max_length: int, batch_size: int,
            dtype: str) -> dict[str, Any]:  # fmt: skip
    """One TRL ``SFTTrainer`` LoRA epoch in a child (``mode``: ``packing`` or ``padding_free``), measured alike."""
    spec = {
        "model": str(model),
        "data": str(data),
        "out": str(out_dir),
        "mode": mode,
        "max_length": max_length,
        "batch_size": batch_size,
        "dtype": dtype,
    }
    cpu = _children_cpu()
    child = run_child([sys.executable, __file__, "--trl-child", json.dumps(spec)], cwd=ROOT, timeout=3600)
    cpu = _children_cpu() - cpu
    line = next((x for x in child.output.splitlines() if x.startswith("RESULT ")), None)
    if child.returncode != 0 or line is None:
        raise RuntimeError(f"TRL SFTTrainer ({mode}) failed (rc {child.returncode}):\n{child.output[-3000:]}")
    result = json.loads(line[len("RESULT ") :])
    shutil.rmtree(out_dir, ignore_errors=True)
    return {
        **result,
        "tokens_per_s": result["tokens"] / result["train_runtime"],
        "wall_s": round(child.seconds, 1),
        "cpu_s": round(cpu, 1),
        "peak_rss_mb": round(child.peak_rss_mb),
    }


def _trl_child(spec: dict[str, Any]) -> None:
    """In the child: TRL 1.16 ``SFTTrainer`` with LoRA on ``spec``'s model and chats; prints ``RESULT {json}``."""
    import datasets
    import peft
    import torch
    import transformers
    import trl

    torch.manual_seed(42)
    model = transformers.Qwen3_5ForConditionalGeneration.from_pretrained(spec["model"], dtype=torch.float32)
    tokenizer = transformers.AutoTokenizer.from_pretrained(spec["model"])
    rows = [json.loads(x) for x in Path(spec["data"]).read_text().splitlines() if x.strip()]
    # padding_free without packing refuses a max_length (it would not enforce it); every chat is within it anyway
    length = None if spec["mode"] == "padding_free" else spec["max_length"]
    config = trl.SFTConfig(output_dir=spec["out"], per_device_train_batch_size=spec["batch_size"],
                           num_train_epochs=1, max_length=length, learning_rate=LORA["learning_rate"],
                           packing=spec["mode"] == "packing", padding_free=spec["mode"] == "padding_free",
                           bf16=spec["dtype"] == "bfloat16", use_cpu=True, logging_steps=1, save_strategy="no",
                           report_to=[], seed=42, lr_scheduler_type="cosine", max_grad_norm=1.0)  # fmt: skip
    lora = peft.LoraConfig(r=LORA["rank"], lora_alpha=LORA["alpha"], target_modules="all-linear",
                           exclude_modules=r".*visual.*", task_type="CAUSAL_LM")  # fmt: skip
    trainer = trl.SFTTrainer(model=model, args=config, train_dataset=datasets.Dataset.from_list(rows),
                             processing_class=tokenizer, peft_config=lora)  # fmt: skip
    tokens = sum(len(ids) for ids in trainer.train_dataset["input_ids"])
    metrics = trainer.train().metrics
    print("RESULT " + json.dumps({"train_runtime": metrics["train_runtime"], "tokens": tokens,
                                  "steps": trainer.state.global_step}), flush=True)  # fmt: skip


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process' finished children so far: with wall seconds, how loaded a run
    was; the whole child (start-up included), so a figure's ratio stays the trainer's tokens/s."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _fit_cap(points: list[tuple[int, float]], cap_mb: float, at: int | None = None) -> Any:
    """The longest row within ``cap_mb``: measured when a point reaches the cap, else a least-squares line; with
    ``at``, the line's MB at ``at`` tokens instead (``None`` from fewer than two points)."""
    if at is not None:
        if len(points) < 2:
            return None
        fit = _fit_cap(points, 1e12)
        return fit["intercept_mb"] + fit["mb_per_1k_tokens"] * at / 1000
    over = [s for s, mb in points if mb > cap_mb]
    under = [s for s, mb in points if mb <= cap_mb]
    if over and under:
        longest = max((s for s in under if s < min(over)), default=None)
        return {"longest_tokens": longest, "how": "measured (the next point is over)"}
    n = len(points)
    mx, my = sum(s for s, _ in points) / n, sum(mb for _, mb in points) / n
    slope = sum((s - mx) * (mb - my) for s, mb in points) / (sum((s - mx) ** 2 for s, _ in points) or 1)
    base = my - slope * mx
    longest = int((cap_mb - base) / slope) if slope > 0 else None
    return {
        "longest_tokens": longest,
        "how": "extrapolated (least-squares line through the measured points)",
        "mb_per_1k_tokens": round(slope * 1000, 1),
        "intercept_mb": round(base),
    }


#: Parts of a step: label -> regular expression on ``file:function`` (the largest cumulative time of a match).
MARKERS = {"whole run": r".*/swiftcore:<module>$", "model load": r".*:from_pretrained$",
           "train step": r".*transformers/trainer\.py:training_step$",
           "model forward (no loss)": r".*modeling_qwen3_5\.py:forward$",
           "chunked loss (lm_head + cross-entropy)": r".*swiftcore_train/loss\.py:.*",
           "backward (C++)": r".*run_backward.*", "optimizer step": r".*torch/optim/.*:step$",
           "gated delta rule (linear-attention fallback)": r".*:torch_chunk_gated_delta_rule$",
           "causal conv (linear-attention fallback)": r".*:torch_causal_conv1d.*",
           "full attention": r".*:sdpa_attention_forward$"}  # fmt: skip


def profile_summary(path: Path, markers: dict[str, str] = MARKERS, top: int = 12) -> dict[str, Any]:
    """cProfile stats at ``path`` -> each marker's seconds (the largest cumulative time among the functions that
    match it, so nested matches are not added twice) and the ``top`` functions by own time."""
    import pstats
    import re

    stats = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    named = {f"{file}:{func}": (tt, ct) for (file, _, func), (_, _, tt, ct, _) in stats.items()}
    parts = {label: round(max((ct for n, (_, ct) in named.items() if re.match(rx, n)), default=0.0), 2)
             for label, rx in markers.items()}  # fmt: skip
    ranked = sorted(named.items(), key=lambda kv: -kv[1][0])[:top]
    return {"seconds": parts, "top_own_s": [{"function": re.sub(r".*/(site-packages|src)/", "", n), "s": round(tt, 2)}
                                            for n, (tt, _) in ranked]}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    """Build the model and chats, run the figures alternately, print them and write the raw JSON; ``argv``: the
    command line's arguments (``bench/run_all.py`` passes ``["--quick"]``), else ``sys.argv``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="3 chats of a quarter of the length (mean 367, rows to 1 k), 1 round, memory at 256/512",
    )
    parser.add_argument("--chats", type=int, default=4, help="chats in each throughput run (one epoch)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds of swiftcore LoRA packed/padded")
    parser.add_argument("--batch-size", type=int, default=2, help="rows (padded chats or packed rows) per step")
    parser.add_argument("--max-length", type=int, default=MAX_TOKENS, help="longest chat and packed row")
    parser.add_argument("--mean-tokens", type=float, default=MEAN_TOKENS, help="the log-normal's mean chat length")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048, 4096],
                        help="packed row lengths of the memory curve")  # fmt: skip
    parser.add_argument(
        "--figures",
        default="lora,memory,trl,full",
        help="which figures, in this order (also: profile, one packed step at the first --lengths under cProfile)",
    )
    parser.add_argument("--profile", action="store_true", help="the middle memory point (chunked) under cProfile")
    parser.add_argument("--label", help="the raw JSON's key for this run (default: quick or full)")
    parser.add_argument("--work", type=Path, help="scratch directory (default: a temporary one)")
    parser.add_argument("--trl-child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.trl_child:
        _trl_child(json.loads(args.trl_child))
        return
    if args.quick:
        args.chats, args.rounds, args.max_length, args.lengths = 3, 1, 1024, [256, 512]
        args.mean_tokens = MEAN_TOKENS * args.max_length / MAX_TOKENS  # the same shape, a quarter of the length
    work = args.work or Path(tempfile.mkdtemp(prefix="swiftcore-bench-realistic-"))
    import psutil
    import transformers

    start, load_before = time.perf_counter(), _load()
    model = make_model(work / "qwen3_5-145m")
    tokenizer = transformers.AutoTokenizer.from_pretrained(model)
    hi = min(MAX_TOKENS, args.max_length)
    lo = min(MIN_TOKENS, hi // 16)
    lengths = chat_lengths(args.chats, seed=None, mean=args.mean_tokens, lo=lo, hi=hi - 64)
    chats = realistic_chats(lengths, tokenizer, seed=1)
    real = [_length(c["messages"], tokenizer) for c in chats]
    data = write_jsonl(chats, work / "chats.jsonl")
    padded_tokens = sum(max(real[i : i + args.batch_size]) * len(real[i : i + args.batch_size])
                        for i in range(0, len(real), args.batch_size))  # fmt: skip
    sample = chat_lengths(20000, seed=7, mean=args.mean_tokens, lo=lo, hi=hi - 64)
    expected = sum(max(sample[i : i + args.batch_size]) * args.batch_size for i in range(0, 20000, args.batch_size))
    result: dict[str, Any] = {
        "machine": machine(), "load_before": load_before, "model": {**TEXT_CONFIG, "parameters_m": 145,
        "tokenizer_tokens": len(tokenizer), "note": "embedding padded from the tiny tokenizer to Qwen3.5's 248,320"},
        "setup": {"chats": args.chats, "chat_tokens": real, "padded_tokens_at_batch": padded_tokens,
                  "expected_padded_over_real": round(expected / sum(sample), 3),
                  "batch_size": args.batch_size, "max_length": args.max_length, "dtype": args.dtype,
                  "lognormal": {"mean": args.mean_tokens, "sigma": SIGMA, "clip": [lo, hi - 64]}, **LORA},
        "command": "python bench/realistic_train.py " + " ".join(sys.argv[1:] if argv is None else argv)}  # fmt: skip
    waste = padded_tokens / sum(real)
    print(f"chats: {real} tokens; padded at batch {args.batch_size}: {padded_tokens} ({waste:.2f}x)", flush=True)

    scale = args.label or ("quick" if args.quick else "full")  # the raw JSON keeps the latest run of each

    def save() -> None:
        result["load_after"], result["wall_s"] = _load(), round(time.perf_counter() - start)
        path = RAW / "realistic_train.json"
        kept = json.loads(path.read_text()) if path.exists() else {}
        kept = {"quick": kept} if "machine" in kept else kept  # an older flat file was a --quick run
        write_raw("realistic_train", {**kept, scale: result})

    def swiftcore_figure(tuner: str) -> None:
        runs: dict[str, list[dict[str, Any]]] = {"padded": [], "packed": []}
        for _ in range(args.rounds if tuner == "lora" else 1):
            for kind in runs:
                r = swiftcore_run(model, data, work / "out", tuner=tuner, packing=kind == "packed",
                                  max_length=args.max_length, batch_size=args.batch_size, dtype=args.dtype)  # fmt: skip
                runs[kind].append(r)
                print(f"swiftcore {tuner} {kind}: {r['tokens_per_s']:.1f} tokens/s, {r['peak_rss_mb']} MB", flush=True)
        tps = {k: [r["tokens_per_s"] for r in v] for k, v in runs.items()}
        result[f"swiftcore_{tuner}"] = {
            "runs": runs, "tokens_per_s": {k: summarize(v) for k, v in tps.items()},
            "peak_rss_mb": {k: summarize([r["peak_rss_mb"] for r in v]) for k, v in runs.items()},
            "ratio_packed_over_padded": pair_ratio(tps["packed"], tps["padded"])}  # fmt: skip

    def trl_figure() -> None:
        trl: dict[str, Any] = {}
        for mode in ("packing", "padding_free"):
            try:
                trl[mode] = trl_run(model, data, work / "out-trl", mode=mode, max_length=args.max_length,
                                    batch_size=args.batch_size, dtype=args.dtype)  # fmt: skip
                print(f"TRL SFTTrainer {mode}: {trl[mode]['tokens_per_s']:.1f} tokens/s, {trl[mode]['peak_rss_mb']} MB",
                      flush=True)  # fmt: skip
            except RuntimeError as exc:
                trl[mode] = {"error": str(exc)[-1500:]}
                print(f"TRL SFTTrainer {mode}: failed (see raw JSON)", flush=True)
        packed = result.get("swiftcore_lora", {}).get("tokens_per_s", {}).get("packed", {}).get("median")
        if packed:
            trl["swiftcore_packed_over"] = {m: round(packed / v["tokens_per_s"], 3) for m, v in trl.items()
                                            if "tokens_per_s" in v}  # fmt: skip
        result["trl_lora"] = trl

    def memory_figure() -> None:
        curve: dict[str, list[dict[str, Any]]] = {"chunked": [], "plain": []}
        cap = CAP_GB * 1000
        profile_at = args.lengths[len(args.lengths) // 2] if args.profile else None
        for s in args.lengths:
            rows = realistic_chats(chat_lengths(12, seed=s, mean=s / 4, hi=s // 2, lo=min(MIN_TOKENS, s // 4)),
                                   tokenizer, seed=s)  # fmt: skip
            mem_data = write_jsonl(rows, work / f"mem{s}.jsonl")
            for kind in ("chunked", "plain"):
                done = [(p["tokens"], p["peak_rss_mb"]) for p in curve[kind] if "peak_rss_mb" in p]
                guess = _fit_cap(done, 0, at=s)
                free = psutil.virtual_memory().available / 2**20 * 0.8
                if guess and guess > free:  # a shared machine: never push the others' processes out of memory
                    curve[kind].append({"row_tokens": s, "skipped": f"predicted {guess:.0f} MB > 80% of the "
                                        f"available {free / 0.8:.0f} MB"})  # fmt: skip
                    print(f"memory {kind} {s}: skipped (predicted {guess:.0f} MB)", flush=True)
                    continue
                raw = work / "profile.pstats" if s == profile_at and kind == "chunked" else None
                r = swiftcore_run(model, mem_data, work / "out-mem", tuner="lora", packing=True, max_length=s,
                                  batch_size=1, dtype=args.dtype, max_steps=1,
                                  loss_chunk=None if kind == "chunked" else 0, profile=raw,
                                  truncation="drop")  # fmt: skip
                curve[kind].append({"row_tokens": s, **r, **({"under_cprofile": True} if raw else {})})
                print(f"memory {kind} {s}: {r['peak_rss_mb']} MB ({r['tokens']} tokens, {r['wall_s']} s)", flush=True)
                if raw is not None:
                    what = (
                        f"one packed LoRA step of {r['tokens']} tokens (chunked loss) under cProfile, start-up included"
                    )
                    result["profile"] = {"what": what, **profile_summary(raw)}
            fits = {k: _fit_cap([(p["tokens"], p["peak_rss_mb"]) for p in v if "peak_rss_mb" in p], cap)
                    for k, v in curve.items() if sum("peak_rss_mb" in p for p in v) > 1}  # fmt: skip
            result["memory_curve"] = {"cap_mb": cap, "points": curve, "longest_in_cap": fits}
            save()

    def profile_figure() -> None:
        s = args.lengths[0]
        rows = realistic_chats(chat_lengths(12, seed=s, mean=s / 4, hi=s // 2, lo=min(MIN_TOKENS, s // 4)),
                               tokenizer, seed=s)  # fmt: skip
        raw = work / "profile.pstats"
        r = swiftcore_run(model, write_jsonl(rows, work / f"mem{s}.jsonl"), work / "out-prof", tuner="lora",
                          packing=True, max_length=s, batch_size=1, dtype=args.dtype, max_steps=1, profile=raw,
                          truncation="drop")  # fmt: skip
        what = f"one packed LoRA step of {r['tokens']} tokens (chunked loss) under cProfile, start-up included"
        result["profile"] = {"what": what, "run": r, **profile_summary(raw)}
        print(json.dumps(result["profile"]["seconds"]), flush=True)

    actions = {"lora": lambda: swiftcore_figure("lora"), "full": lambda: swiftcore_figure("full"), "trl": trl_figure,
               "memory": memory_figure, "profile": profile_figure}  # fmt: skip
    for name in args.figures.split(","):
        actions[name]()
        save()
    save()
    print(json.dumps({k: v for k, v in result.items() if k not in ("machine",)}, indent=1)[:6000])


if __name__ == "__main__":
    main()
