"""Training throughput: real (non-pad) tokens/s and peak RSS of ``swiftcore train``, padded vs packed.

One epoch of LoRA on a tiny qwen3_5 (``swiftcore make-tiny``) over a mixed-length dataset
(:func:`conversations.mixed_length_corpus`), alternating ``--packing`` off / on run by run. Tokens/s
is the real tokens of the epoch (``num_input_tokens_seen`` counted on non-pad tokens) over the
trainer's own ``train_runtime``, so process start-up, model loading and encoding are not counted
(they are reported separately as wall seconds). Peak RSS is the child's ``maxrss``.

Usage: ``python bench/train_throughput.py [--runs 5] [--samples 16] [--batch-size 4]``; figures go to
stdout and ``bench/raw/train_throughput.json``. ``bench/msswift_compare.py`` reuses
:func:`swiftcore_train` for its ms-swift comparison.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from common import ROOT, alternate, machine, pair_ratio, run_child, summarize, write_raw
from conversations import mixed_length_corpus, write_jsonl

__all__ = ["TrainSetup", "default_setup", "make_dataset", "make_tiny", "read_swiftcore_log", "swiftcore_train"]

SWIFTCORE = Path(sys.executable).parent / "swiftcore"


class TrainSetup(dict):
    """The shared settings of every training run (dict: it goes into the raw JSON as is)."""


def make_tiny(name: str, out: Path) -> Path:
    """Write ``swiftcore make-tiny NAME OUT`` (seed 0) once; return ``out``."""
    if not (out / "config.json").exists():
        subprocess.run([str(SWIFTCORE), "make-tiny", name, str(out), "--force"], check=True,
                       stdout=subprocess.DEVNULL)
    return out


def make_dataset(work: Path, samples: int, max_turns: int, seed: int = 1) -> Path:
    """The mixed-length training set (``samples`` rows) as JSONL."""
    return write_jsonl(mixed_length_corpus(samples, seed=seed, max_turns=max_turns), work / f"mixed{samples}.jsonl")


def read_swiftcore_log(out_dir: Path) -> dict[str, Any]:
    """``train_runtime``, real tokens and first-step loss from ``OUT/logs.jsonl``."""
    rows = [json.loads(line) for line in (out_dir / "logs.jsonl").read_text().splitlines() if line.strip()]
    final = next(r for r in reversed(rows) if "train_runtime" in r and "train_loss" in r)
    first = next(r for r in rows if "loss" in r)
    return {"train_runtime": float(final["train_runtime"]), "tokens": int(final["num_input_tokens_seen"]),
            "first_loss": float(first["loss"]), "steps": int(final["step"])}


def swiftcore_train(model: Path, data: Path, setup: TrainSetup, *, packing: bool, out_dir: Path,
                    max_steps: int = -1, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``swiftcore train`` once (LoRA, one epoch or ``max_steps``) and measure it; ``env`` replaces the
    child's environment (``OMP_NUM_THREADS``, say)."""
    shutil.rmtree(out_dir, ignore_errors=True)
    argv = [str(SWIFTCORE), "train", "--model", str(model), "--dataset", str(data), "--output-dir", str(out_dir),
            "--tuner", "lora", "--lora-rank", str(setup["lora_rank"]), "--lora-alpha", str(setup["lora_alpha"]),
            "--batch-size", str(setup["batch_size"]), "--max-length", str(setup["max_length"]),
            "--learning-rate", str(setup["learning_rate"]), "--num-train-epochs", "1", "--max-steps", str(max_steps),
            "--logging-steps", "1", "--save-steps", "100000", "--no-plot", "--seed", "42"]
    if packing:
        argv.append("--packing")
    child = run_child(argv, cwd=ROOT, env=env)
    if child.returncode != 0:
        raise RuntimeError(f"swiftcore train failed (rc {child.returncode}):\n{child.output[-3000:]}")
    log = read_swiftcore_log(out_dir)
    return {**log, "tokens_per_s": log["tokens"] / log["train_runtime"], "wall_s": child.seconds,
            "peak_rss_mb": child.peak_rss_mb}


def default_setup(batch_size: int = 4, max_length: int = 1024) -> TrainSetup:
    """The settings both systems get: LoRA r=8, alpha=32, all linear layers, lr 1e-4, fp32, CPU."""
    return TrainSetup(batch_size=batch_size, max_length=max_length, lora_rank=8, lora_alpha=32,
                      learning_rate=1e-4, dtype="float32", epochs=1)


def main() -> None:
    """Alternate padded and packed ``swiftcore train`` runs and print tokens/s and peak RSS."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--max-turns", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--work", type=Path, help="scratch directory (default: a temporary one)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="swiftcore-bench-train-"))
    model = make_tiny("qwen3_5", work / "tiny-qwen3_5")
    data = make_dataset(work, args.samples, args.max_turns)
    setup = default_setup(args.batch_size)
    runs: dict[str, list[dict]] = {"padded": [], "packed": []}

    def one(kind: str) -> float:
        result = swiftcore_train(model, data, setup, packing=kind == "packed", out_dir=work / f"out-{kind}")
        runs[kind].append(result)
        return result["tokens_per_s"]

    values = alternate(args.runs, {"padded": lambda: one("padded"), "packed": lambda: one("packed")})
    result = {"machine": machine(), "setup": setup, "samples": args.samples, "runs": runs,
              "tokens_per_s": {k: summarize(v) for k, v in values.items()},
              "peak_rss_mb": {k: summarize([r["peak_rss_mb"] for r in v]) for k, v in runs.items()},
              "ratio_packed_over_padded": pair_ratio(values["packed"], values["padded"])}
    write_raw("train_throughput", result)
    for kind in runs:
        t, m = result["tokens_per_s"][kind], result["peak_rss_mb"][kind]
        print(f"swiftcore train {kind:7} {t['median']:8.1f} tokens/s (min {t['min']:.1f}, max {t['max']:.1f}), "
              f"peak RSS {m['median']:.0f} MB")
    print(f"packed / padded: {result['ratio_packed_over_padded']['median']:.2f}x")


if __name__ == "__main__":
    main()
