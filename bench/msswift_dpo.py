"""Figure 5: DPO pairs/s and peak RSS, ``swiftcore train --recipe dpo`` vs ``swift rlhf --rlhf_type dpo``, CPU, LoRA.

Same tiny qwen3_5 weights and tokenizer (ms-swift gets :func:`msswift_train.peer_checkpoint`'s copy), same
synthetic pairs file (ms-swift's row format, ``messages`` + ``rejected_response``, which both accept; chats of
mixed length), LoRA r=8/alpha=32 on all linear layers, batch size, max length, beta 0.1, sigmoid loss, fp32,
gradient accumulation 1, no gradient checkpointing (ms-swift's default is on; it is switched off), one epoch
of ``pairs`` rows (>= 30 steps), logging every step. The reference model is the adapter-disabled policy on both
sides. Alternating runs: swiftcore padded, ms-swift, swiftcore ``--padding-free``. ms-swift's
``--padding_free true`` is attempted once and its refusal recorded.

pairs/s = pairs trained / the trainer's ``train_runtime`` on both sides (both are transformers' Trainer
under TRL's DPOTrainer, so the clock covers the same loop; start-up, loading and encoding are not counted).

Threads: every run gets ``OMP_NUM_THREADS=--threads`` (default 1). On a shared, loaded 2-core machine torch's
default (one thread per core) oversubscribes: a swiftcore DPO step took 20 s instead of 1.6 s. Both sides get
the same setting.

First-step check: one step with the whole check set in one batch (order-free). The first DPO loss is ln 2 on
both sides whatever the data (a fresh LoRA adapter has B = 0, so policy = reference); the numbers that show
whether both score the same tokens are the first step's ``logps/chosen`` and ``logps/rejected``.

Usage: ``python bench/msswift_dpo.py [--runs 3] [--pairs 120] [--batch-size 4]``; raw JSON goes to
``bench/raw/msswift_dpo.json``, then ``python bench/report.py`` rewrites RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import PEER_SWIFT, ROOT, alternate, machine, pair_ratio, run_child, summarize, write_raw
from conversations import _pieces, mixed_length_corpus, write_jsonl

__all__ = ["dpo_figure", "make_pairs", "msswift_dpo", "run", "swiftcore_dpo"]

SWIFTCORE = Path(sys.executable).parent / "swiftcore"
PLUGIN = Path(__file__).resolve().parent / "_msswift_plugin.py"
SERIES = ("swiftcore_padded", "msswift_padded", "swiftcore_padding_free")


def make_pairs(path: Path, n: int, *, max_turns: int = 4, seed: int = 1) -> Path:
    """``n`` preference pairs in ms-swift's format: a mixed-length chat whose last assistant turn is the chosen
    reply, and ``rejected_response``, another reply of the reference corpus."""
    rng = random.Random(seed + 1000)
    replies = sorted({a for _, a in _pieces()["pairs"]})
    rows = mixed_length_corpus(n, seed=seed, max_turns=max_turns)
    for row in rows:
        chosen = row["messages"][-1]["content"]
        row["rejected_response"] = rng.choice([r for r in replies if r != chosen])
    return write_jsonl(rows, path)


def default_setup(batch_size: int = 4, max_length: int = 1024, threads: int = 1) -> dict[str, Any]:
    """The settings both systems get."""
    return {"batch_size": batch_size, "max_length": max_length, "lora_rank": 8, "lora_alpha": 32,
            "learning_rate": 1e-4, "beta": 0.1, "loss_type": "sigmoid", "dtype": "float32", "epochs": 1,
            "threads": threads}


def _env(setup: dict[str, Any]) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": str(setup["threads"])}


def _first(rows: list[dict[str, Any]]) -> dict[str, float]:
    first = next(r for r in rows if "loss" in r)
    return {"first_loss": float(first["loss"]), "first_logps_chosen": float(first["logps/chosen"]),
            "first_logps_rejected": float(first["logps/rejected"])}


def swiftcore_dpo(model: Path, data: Path, pairs: int, setup: dict[str, Any], *, padding_free: bool, out_dir: Path,
                  max_steps: int = -1) -> dict[str, Any]:
    """Run ``swiftcore train --recipe dpo`` once (LoRA, one epoch or ``max_steps``) and measure it."""
    shutil.rmtree(out_dir, ignore_errors=True)
    argv = [str(SWIFTCORE), "train", "--recipe", "dpo", "--model", str(model), "--dataset", str(data),
            "--output-dir", str(out_dir), "--tuner", "lora", "--lora-rank", str(setup["lora_rank"]),
            "--lora-alpha", str(setup["lora_alpha"]), "--batch-size", str(setup["batch_size"]),
            "--max-length", str(setup["max_length"]), "--learning-rate", str(setup["learning_rate"]),
            "--num-train-epochs", "1", "--max-steps", str(max_steps), "--logging-steps", "1",
            "--save-steps", "100000", "--no-plot", "--seed", "42", "--dtype", setup["dtype"],
            "--beta", str(setup["beta"]), "--loss-type", setup["loss_type"]]
    if padding_free:
        argv.append("--padding-free")
    child = run_child(argv, cwd=ROOT, env=_env(setup))
    if child.returncode != 0:
        raise RuntimeError(f"swiftcore train --recipe dpo failed (rc {child.returncode}):\n{child.output[-3000:]}")
    rows = [json.loads(line) for line in (out_dir / "logs.jsonl").read_text().splitlines() if line.strip()]
    final = next(r for r in reversed(rows) if "train_runtime" in r and "train_loss" in r)
    steps = int(final["step"])
    trained = min(pairs, steps * setup["batch_size"])
    runtime = float(final["train_runtime"])
    return {"train_runtime": runtime, "steps": steps, "pairs": trained, "pairs_per_s": trained / runtime,
            "tokens": int(final.get("num_input_tokens_seen", 0)), **_first(rows), "wall_s": child.seconds,
            "peak_rss_mb": child.peak_rss_mb}


def msswift_dpo(model: Path, data: Path, pairs: int, setup: dict[str, Any], *, out_dir: Path,
                extra: tuple[str, ...] = (), max_steps: int = -1) -> dict[str, Any]:
    """Run ``swift rlhf --rlhf_type dpo`` once with the settings of :func:`swiftcore_dpo`; measure it.

    Returns the measurements, or ``{"refused": message}`` when ms-swift exits with an error.
    """
    shutil.rmtree(out_dir, ignore_errors=True)
    argv = [str(PEER_SWIFT), "rlhf", "--rlhf_type", "dpo", "--model", str(model), "--model_type", "qwen3_5",
            "--template", "qwen3_5", "--external_plugins", str(PLUGIN), "--dataset", str(data),
            "--tuner_type", "lora", "--lora_rank", str(setup["lora_rank"]), "--lora_alpha", str(setup["lora_alpha"]),
            "--target_modules", "all-linear", "--per_device_train_batch_size", str(setup["batch_size"]),
            "--gradient_accumulation_steps", "1", "--gradient_checkpointing", "false",
            "--max_length", str(setup["max_length"]), "--learning_rate", str(setup["learning_rate"]),
            "--beta", str(setup["beta"]), "--loss_type", setup["loss_type"], "--num_train_epochs", "1",
            "--max_steps", str(max_steps), "--logging_steps", "1", "--save_steps", "100000",
            "--output_dir", str(out_dir), "--dataloader_num_workers", "0", "--dataset_num_proc", "1",
            "--lazy_tokenize", "false", "--split_dataset_ratio", "0", "--report_to", "none",
            "--torch_dtype", setup["dtype"], "--seed", "42", "--save_only_model", "true", *extra]
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    child = run_child(argv, cwd=out_dir.parent, env=_env(setup))
    if child.returncode != 0:
        lines = [ln for ln in child.output.splitlines() if "Error" in ln or "error" in ln]
        return {"refused": (lines[-1] if lines else child.output[-500:]).strip(), "returncode": child.returncode}
    logs = sorted(out_dir.glob("v*/logging.jsonl"))
    if not logs:
        raise RuntimeError(f"ms-swift wrote no logging.jsonl under {out_dir}:\n{child.output[-2000:]}")
    rows = [json.loads(line) for line in logs[-1].read_text().splitlines() if line.strip()]
    final = next(r for r in rows if "train_runtime" in r)
    steps = int(str(final.get("global_step/max_steps", "0/0")).split("/")[0])
    trained = min(pairs, steps * setup["batch_size"])
    runtime = float(final["train_runtime"])
    stats = next((r["train_dataset"] for r in rows if "train_dataset" in r), None)
    return {"train_runtime": runtime, "steps": steps, "pairs": trained, "pairs_per_s": trained / runtime,
            **_first(rows), "dataset_stats": stats, "wall_s": child.seconds, "peak_rss_mb": child.peak_rss_mb}


def dpo_figure(model: Path, peer_model: Path, data: Path, pairs: int, check_data: Path, check_size: int,
               setup: dict[str, Any], runs: int, work: Path) -> dict[str, Any]:
    """Figure 5 (see the module docstring); returns the raw result."""
    results: dict[str, list[dict]] = {k: [] for k in SERIES}

    def ours(padding_free: bool) -> float:
        kind = "swiftcore_padding_free" if padding_free else "swiftcore_padded"
        r = swiftcore_dpo(model, data, pairs, setup, padding_free=padding_free, out_dir=work / kind)
        results[kind].append(r)
        return r["pairs_per_s"]

    def theirs() -> float:
        r = msswift_dpo(peer_model, data, pairs, setup, out_dir=work / "msswift_padded")
        if "refused" in r:
            raise RuntimeError(f"swift rlhf --rlhf_type dpo failed: {r}")
        results["msswift_padded"].append(r)
        return r["pairs_per_s"]

    values = alternate(runs, {"swiftcore_padded": lambda: ours(False), "msswift_padded": theirs,
                              "swiftcore_padding_free": lambda: ours(True)})
    try:  # a broken probe or check must not cost the throughput numbers above
        refusals = {"--padding_free": msswift_dpo(peer_model, data, pairs, setup, out_dir=work / "msswift-pf",
                                                  extra=("--padding_free", "true"), max_steps=1)}
    except Exception as exc:
        refusals = {"error": {"refused": f"probe failed: {type(exc).__name__}: {exc}"}}
    check_setup = {**setup, "batch_size": check_size}
    first: dict[str, dict[str, float] | None] = {}
    for kind in SERIES:
        try:
            if kind == "msswift_padded":
                r = msswift_dpo(peer_model, check_data, check_size, check_setup, out_dir=work / "check-m",
                                max_steps=1)
            else:
                r = swiftcore_dpo(model, check_data, check_size, check_setup, padding_free=kind.endswith("free"),
                                  out_dir=work / f"check-{kind}", max_steps=1)
            first[kind] = {k: r[k] for k in ("first_loss", "first_logps_chosen", "first_logps_rejected")}
        except Exception:
            first[kind] = None
    return {
        "setup": setup, "pairs": pairs, "steps_per_epoch": -(-pairs // setup["batch_size"]), "per_run": results,
        "pairs_per_s": {k: summarize(v) for k, v in values.items()}, "raw_pairs_per_s": values,
        "peak_rss_mb": {k: summarize([r["peak_rss_mb"] for r in v]) for k, v in results.items()},
        "ratio_padded": pair_ratio(values["swiftcore_padded"], values["msswift_padded"]),
        "ratio_padding_free_vs_msswift_padded": pair_ratio(values["swiftcore_padding_free"], values["msswift_padded"]),
        "ratio_padding_free_over_padded": pair_ratio(values["swiftcore_padding_free"], values["swiftcore_padded"]),
        "msswift_refusals": refusals, "first_step": first, "check_pairs": check_size,
    }


def run(runs: int = 3, pairs: int = 120, batch_size: int = 4, max_turns: int = 4, threads: int = 1,
        work: Path | None = None, command: str | None = None) -> dict[str, Any]:
    """Run figure 5 and write ``bench/raw/msswift_dpo.json``; returns the raw result (``error`` on failure)."""
    from msswift_train import peer_checkpoint
    from train_throughput import make_tiny

    if pairs < 30 * batch_size:
        raise ValueError(f"--pairs {pairs}: one epoch must be >= 30 steps of {batch_size} pairs")
    work = work or Path(tempfile.mkdtemp(prefix="swiftcore-bench-dpo-"))
    started = time.perf_counter()
    result: dict[str, Any] = {"machine": machine(), "runs": runs,
                              "command": command or f"python bench/msswift_dpo.py --runs {runs} --pairs {pairs} "
                              f"--batch-size {batch_size} --max-turns {max_turns} --threads {threads}"}
    try:
        model = make_tiny("qwen3_5", work / "tiny-qwen3_5")
        peer_model = peer_checkpoint(model, work / "peer-qwen3_5")
        data = make_pairs(work / f"pairs{pairs}.jsonl", pairs, max_turns=max_turns)
        check = make_pairs(work / "check" / "pairs.jsonl", batch_size * 2, max_turns=max_turns, seed=3)
        result.update(dpo_figure(model, peer_model, data, pairs, check, batch_size * 2,
                                 default_setup(batch_size, threads=threads), runs, work / "dpo"))
        result["max_turns"] = max_turns
    except Exception as exc:  # recorded and shown in RESULTS.md instead of numbers
        import traceback

        result["error"] = f"{type(exc).__name__}: {exc}"
        print(f"figure dpo failed:\n{traceback.format_exc()}", file=sys.stderr)
    result["seconds"] = round(time.perf_counter() - started, 1)
    write_raw("msswift_dpo", result)
    return result


def main() -> None:
    """Parse the options, run figure 5, print its summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="alternating runs of each series")
    parser.add_argument("--pairs", type=int, default=120, help="pairs in the epoch (>= 30 steps)")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-turns", type=int, default=4, help="longest chat of the mixed-length pairs")
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of every run (both sides)")
    parser.add_argument("--work", type=Path, help="scratch directory (default: a temporary one)")
    args = parser.parse_args()
    result = run(args.runs, args.pairs, args.batch_size, args.max_turns, args.threads, args.work)
    print(json.dumps({k: result.get(k) for k in ("error", "pairs_per_s", "ratio_padded", "peak_rss_mb",
                                                 "msswift_refusals", "first_step", "seconds")}, indent=2))


if __name__ == "__main__":
    main()
