"""Figure 6 (informational): ``swiftcore train --engine megatron`` at TP1, TP2 and PP2, and the transformers engine.

Same tiny Qwen3.5 (``make-tiny qwen3_5``), same chats (``conversations.mixed_length_corpus``), full fine-tuning,
batch 2, fp32, ``--max-steps`` steps, one thread per process (``OMP_NUM_THREADS=1``). Runs alternate
(transformers, megatron TP1, megatron TP2 and PP2 under ``torchrun --nproc-per-node 2``, ...). PP2 runs each
step's batch as one micro-batch, like the others, so its two stages take turns (no overlap to gain from).

tokens/s = the engine's own ``tokens_per_second`` of its last log record (tokens of the trained batches over the
training loop's time; start-up, loading and encoding not counted). Peak memory per rank = the megatron engine's
``peak_rss_mb`` record (each rank's ``VmHWM``); for the transformers engine the process tree's peak RSS.

On a 2-core CPU with a model this small, TP2 and PP2 cannot be faster (two processes share two cores and every layer
adds collectives); the figure is the same measurement the GPU check prints on real hardware.

Usage: ``python bench/megatron_train.py [--runs 3] [--steps 20]``; raw JSON goes to ``bench/raw/megatron_train.json``
and the figure replaces the ``megatron`` section of RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from common import machine, machine_text, replace_section, run_child, summarize, write_raw
from conversations import mixed_length_corpus, write_jsonl

BIN = Path(sys.executable).parent
SERIES = ("transformers", "megatron_tp1", "megatron_tp2", "megatron_pp2")
BEGIN, END = "<!-- megatron-train:begin -->", "<!-- megatron-train:end -->"


def _command(series: str, model: Path, data: Path, out: Path, steps: int) -> list[str]:
    train = [str(BIN / "swiftcore"), "train", "--model", str(model), "--dataset", str(data), "--output-dir", str(out),
             "--tuner", "full", "--max-steps", str(steps), "--batch-size", "2", "--logging-steps", str(steps),
             "--save-steps", str(10 * steps), "--no-plot", "--max-length", "1024"]  # fmt: skip
    if series == "transformers":
        return train
    if series == "megatron_tp1":
        return [*train, "--engine", "megatron"]
    from swiftcore_megatron import free_port

    launcher = [str(BIN / "torchrun"), "--nproc-per-node", "2", "--master-port", str(free_port())]
    option = {"megatron_tp2": "--tp", "megatron_pp2": "--pp"}[series]
    return [*launcher, *train, "--engine", "megatron", option, "2"]


def run(runs: int, steps: int) -> dict:
    """Measure every series ``runs`` times, alternating; return the raw result."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("SWIFTCORE_")}, "OMP_NUM_THREADS": "1"}
    results: dict[str, dict[str, list[float]]] = {s: {"tokens_per_second": [], "peak_rss_mb": []} for s in SERIES}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        from swiftcore_tiny import make_tiny

        from swiftcore import load_plugins

        model = make_tiny(load_plugins(env={}).registry.get("model", "qwen3_5"), work / "tiny", seed=0)
        data = write_jsonl(mixed_length_corpus(64, seed=3, max_turns=3), work / "chats.jsonl")
        for i in range(runs):
            for series in SERIES:
                out = work / f"{series}-{i}"
                child = run_child(_command(series, model, data, out, steps), env=env)
                if child.returncode != 0:
                    raise SystemExit(f"{series} failed:\n{child.output[-3000:]}")
                rows = [json.loads(line) for line in (out / "logs.jsonl").read_text().splitlines()]
                results[series]["tokens_per_second"].append(next(r for r in rows if "loss" in r)["tokens_per_second"])
                memory = next((r["peak_rss_mb"] for r in rows if "peak_rss_mb" in r), [child.peak_rss_mb])
                results[series]["peak_rss_mb"].append(max(memory))
                shutil.rmtree(out)
    return {"machine": machine(), "runs": runs, "steps": steps, "seconds": round(time.perf_counter() - start, 1),
            "series": {s: {k: summarize(v) for k, v in r.items()} for s, r in results.items()}}  # fmt: skip


def render(raw: dict) -> str:
    """The Markdown section of figure 6."""
    names = {"transformers": "transformers engine, 1 process", "megatron_tp1": "megatron engine, TP1, 1 process",
             "megatron_tp2": "megatron engine, TP2, 2 processes (torchrun, gloo)",
             "megatron_pp2": "megatron engine, PP2, 2 processes (torchrun, gloo; 1F1B schedule)"}  # fmt: skip
    lines = [BEGIN, "", "## 6. Megatron engine: TP1 vs TP2 vs PP2 (informational)", "",
             f"`bench/megatron_train.py`, {raw['runs']} alternating runs of {raw['steps']} steps, tiny Qwen3.5, full "
             f"fine-tuning, batch 2, fp32, one thread per process; {raw['machine']['date']}, "
             f"{machine_text(raw['machine'])}. Median (min–max).", "",
             "| series | tokens/s | peak RSS per rank (MB) |", "| --- | --- | --- |"]  # fmt: skip
    for series, stats in raw["series"].items():
        t, m = stats["tokens_per_second"], stats["peak_rss_mb"]
        lines.append(f"| {names[series]} | {t['median']:.1f} ({t['min']:.1f}–{t['max']:.1f}) | "
                     f"{m['median']:.0f} ({m['min']:.0f}–{m['max']:.0f}) |")  # fmt: skip
    lines += [
        "",
        "Informational: a 0.5 M-parameter model on two shared cores. TP2 pays collectives in every layer and splits "
        "no real compute, so it cannot be faster here; PP2 sends activations between its two stages, which take "
        "turns on a step of one micro-batch. Per-rank memory is mostly the imported libraries (torch, "
        "transformers, megatron-core), so splitting the weights saves little of it at this size. The megatron "
        "engine's step is slower than the transformers engine's on this model (megatron-core's PyTorch "
        "gated-DeltaNet path and per-layer overheads; not profiled yet).",
        "",
        END,
    ]
    return "\n".join(lines)


def write_section(raw: dict) -> Path:
    """Replace (or append) figure 6's section of RESULTS.md."""
    return replace_section(render(raw), BEGIN, END)


def main() -> None:
    """Run figure 6 and write its raw JSON and RESULTS.md section."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    raw = run(args.runs, args.steps)
    write_raw("megatron_train", raw)
    print(write_section(raw))


if __name__ == "__main__":
    main()
