"""Figure 3: training tokens/s and peak RSS, ``swiftcore train`` vs ``swift sft`` (ms-swift 4.6.0), CPU, LoRA.

Same tiny qwen3_5 weights and tokenizer, same mixed-length dataset, LoRA r=8/alpha=32 on all linear
layers, batch size, max length, one epoch, fp32, gradient accumulation 1. Alternating runs:
swiftcore padded, swiftcore packed (padding-free), ms-swift padded. ms-swift's ``--padding_free`` and
``--packing`` are attempted once each and their refusal is recorded.

Tokens/s = real tokens of the epoch / the trainer's ``train_runtime`` on both sides (both use
transformers' Trainer, so the clock covers the same loop). Real tokens: swiftcore's non-pad
``num_input_tokens_seen``; ms-swift's own encoded-length statistics (``train_dataset``: mean x size in
its ``logging.jsonl``). ms-swift pre-encodes too (``--lazy_tokenize false``), so neither side
tokenizes inside the timed loop.

First-step loss check: one step with the whole check set in one batch, so data order cannot matter.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

from common import PEER_SWIFT, ROOT, alternate, pair_ratio, run_child, summarize
from train_throughput import TrainSetup, swiftcore_train

__all__ = ["msswift_sft", "train_figure", "peer_checkpoint"]

PLUGIN = Path(__file__).resolve().parent / "_msswift_plugin.py"


def peer_checkpoint(model: Path, out: Path) -> Path:
    """ms-swift's copy of ``model``: same weights, tokenizer and template; processor settings moved aside.

    Without torchvision, transformers cannot build ``Qwen3VLProcessor`` (its video processor needs it),
    so the copy has no ``processor_config.json``; ``_msswift_plugin.py`` rebuilds the image processor from
    ``swiftcore_bench_image_processor.json``.
    """
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(model, out)
    processor = out / "processor_config.json"
    if processor.exists():
        settings = json.loads(processor.read_text())
        if "image_processor" in settings:
            (out / "swiftcore_bench_image_processor.json").write_text(json.dumps(settings["image_processor"]))
        processor.unlink()
    return out


def _msswift_log(out_dir: Path) -> dict[str, Any]:
    logs = sorted(out_dir.glob("v*/logging.jsonl"))
    if not logs:
        raise RuntimeError(f"ms-swift wrote no logging.jsonl under {out_dir}")
    rows = [json.loads(line) for line in logs[-1].read_text().splitlines() if line.strip()]
    final = next(r for r in rows if "train_runtime" in r)
    first = next(r for r in rows if "loss" in r)
    stats = next(r["train_dataset"] for r in rows if "train_dataset" in r)
    match = re.match(r"\s*([0-9.]+)±[0-9.]+, min=[0-9.]+, max=[0-9.]+, size=(\d+)", stats)
    if not match:
        raise RuntimeError(f"cannot read ms-swift's dataset statistics {stats!r}")
    tokens = round(float(match.group(1)) * int(match.group(2)))
    steps = int(str(final.get("global_step/max_steps", "0/0")).split("/")[0])
    return {"train_runtime": float(final["train_runtime"]), "tokens": tokens, "first_loss": float(first["loss"]),
            "steps": steps, "dataset_stats": stats}


def msswift_sft(model: Path, data: Path, setup: TrainSetup, *, out_dir: Path, extra: tuple[str, ...] = (),
                max_steps: int = -1, model_type: str = "qwen3_5", template: str = "qwen3_5",
                env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``swift sft`` once with the same settings as :func:`swiftcore_train`; measure it.

    ``model_type`` and ``template`` are ms-swift's names for the family (a local tiny checkpoint needs both);
    ``env`` replaces the child's environment (``OMP_NUM_THREADS``, say).

    Returns the measurements, or ``{"refused": message}`` when ms-swift exits with an error.
    """
    shutil.rmtree(out_dir, ignore_errors=True)
    argv = [str(PEER_SWIFT), "sft", "--model", str(model), "--model_type", model_type, "--template", template,
            "--external_plugins", str(PLUGIN), "--dataset", str(data), "--tuner_type", "lora",
            "--lora_rank", str(setup["lora_rank"]), "--lora_alpha", str(setup["lora_alpha"]),
            "--target_modules", "all-linear", "--per_device_train_batch_size", str(setup["batch_size"]),
            "--gradient_accumulation_steps", "1", "--max_length", str(setup["max_length"]),
            "--learning_rate", str(setup["learning_rate"]), "--num_train_epochs", "1", "--max_steps", str(max_steps),
            "--logging_steps", "1", "--save_steps", "100000", "--output_dir", str(out_dir),
            "--dataloader_num_workers", "0", "--dataset_num_proc", "1", "--lazy_tokenize", "false",
            "--split_dataset_ratio", "0", "--report_to", "none", "--torch_dtype", "float32", "--seed", "42",
            "--save_only_model", "true", *extra]
    child = run_child(argv, cwd=out_dir.parent, env=env)
    if child.returncode != 0:
        lines = [ln for ln in child.output.splitlines() if "Error" in ln or "error" in ln]
        return {"refused": (lines[-1] if lines else child.output[-500:]).strip(), "returncode": child.returncode}
    log = _msswift_log(out_dir)
    return {**log, "tokens_per_s": log["tokens"] / log["train_runtime"], "wall_s": child.seconds,
            "peak_rss_mb": child.peak_rss_mb}


def train_figure(model: Path, peer_model: Path, data: Path, check_data: Path, check_size: int, setup: TrainSetup,
                 runs: int, work: Path) -> dict[str, Any]:
    """Figure 3 (see the module docstring); returns the raw result."""
    results: dict[str, list[dict]] = {"swiftcore_padded": [], "swiftcore_packed": [], "msswift_padded": []}

    def ours(packing: bool) -> float:
        kind = "swiftcore_packed" if packing else "swiftcore_padded"
        r = swiftcore_train(model, data, setup, packing=packing, out_dir=work / kind)
        results[kind].append(r)
        return r["tokens_per_s"]

    def theirs() -> float:
        r = msswift_sft(peer_model, data, setup, out_dir=work / "msswift_padded")
        if "refused" in r:
            raise RuntimeError(f"swift sft failed: {r}")
        results["msswift_padded"].append(r)
        return r["tokens_per_s"]

    values = alternate(runs, {"swiftcore_padded": lambda: ours(False), "msswift_padded": theirs,
                              "swiftcore_packed": lambda: ours(True)})
    # The refusal probes and the loss check must not cost the throughput numbers above if they break.
    try:
        refusals = {flag: msswift_sft(peer_model, data, setup, out_dir=work / f"msswift{flag}",
                                      extra=(flag, "true"), max_steps=1)
                    for flag in ("--padding_free", "--packing")}
    except Exception as exc:
        refusals = {"error": {"refused": f"probe failed: {type(exc).__name__}: {exc}"}}
    check_setup = TrainSetup({**setup, "batch_size": check_size})
    first: dict[str, float | None] = {}
    for kind in ("swiftcore_padded", "swiftcore_packed", "msswift_padded"):
        try:
            if kind == "msswift_padded":
                first[kind] = msswift_sft(peer_model, check_data, check_setup, out_dir=work / "check-m",
                                          max_steps=1).get("first_loss")
            else:
                first[kind] = swiftcore_train(model, check_data, check_setup, packing=kind.endswith("packed"),
                                              out_dir=work / f"check-{kind}", max_steps=1)["first_loss"]
        except Exception:
            first[kind] = None
    return {
        "setup": dict(setup), "runs": results, "tokens_per_s": {k: summarize(v) for k, v in values.items()},
        "raw_tokens_per_s": values,
        "peak_rss_mb": {k: summarize([r["peak_rss_mb"] for r in v]) for k, v in results.items()},
        "ratio_padded": pair_ratio(values["swiftcore_padded"], values["msswift_padded"]),
        "ratio_packed_vs_msswift_padded": pair_ratio(values["swiftcore_packed"], values["msswift_padded"]),
        "msswift_refusals": refusals, "first_step_loss": first, "check_samples": check_size,
        "root": str(ROOT),
    }
