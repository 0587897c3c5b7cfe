"""``swiftcore train --train-part thinker|talker|all``: which part of a Qwen3-Omni checkpoint one training run trains.

swiftcore-train never names this plugin: the option comes from ``swiftcore_addoption``, the refusals from
``swiftcore_train_check`` (before anything heavy loads) and the talker's run from ``swiftcore_train_run``, the hook
through which a model plugin takes a run of the ``sft`` recipe over (:mod:`swiftcore_plugin_qwen3_omni.plugin`).

- ``thinker``: the ``sft`` recipe as without the option, with LoRA: the adapter applies to the input checkpoint, whose
  talker and Code2Wav stay as they are (a fully fine-tuned thinker is saved alone, without its talker: refused).
- ``talker``: :func:`swiftcore_plugin_qwen3_omni.talker.train_talker` (what ``swiftcore omni-talker-train`` runs) on
  the run's dataset, ``--max-steps`` (else ``--num-train-epochs`` rows), ``--learning-rate`` and ``--seed``: the whole
  talker fully fine-tuned, thinker and Code2Wav frozen, saved as a whole model in ``OUTPUT_DIR/checkpoint-N``.
- ``all``: the talker first (``OUTPUT_DIR/checkpoint-N``, its thinker bit-identical to the input's), then a LoRA
  adapter of the thinker trained on that checkpoint (``OUTPUT_DIR/thinker/checkpoint-M``), so the adapter's base is
  the model with the trained talker. The two parts train independently (the talker reads only the thinker's frozen
  embedding table for text rows, which LoRA leaves alone), so the order changes nothing but the adapter's base.
  The dataset's rows carry both targets: ``messages`` (the thinker's) and ``codes`` (the talker's).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from swiftcore.api import SwiftcoreError

__all__ = ["PARTS", "check_train_part", "run_train_part"]

#: ``--train-part`` values.
PARTS = ("thinker", "talker", "all")

log = logging.getLogger("swiftcore.train")

#: TrainConfig fields the talker trainer does not read: (field, is it set?, why, what to do).
_TALKER_UNSUPPORTED: tuple[tuple[str, Any, str], ...] = (
    ("packing", lambda v: v, "the talker trains one row per step (its codec frames follow the row's reply)"),
    ("padding_free", lambda v: v, "the talker trains one row per step (its codec frames follow the row's reply)"),
    ("batch_size", lambda v: v != 1, "the talker trains one row per step"),
    ("gradient_accumulation_steps", lambda v: v != 1, "the talker trains one row per step"),
    ("val_dataset", lambda v: bool(v), "the talker run holds out no validation data"),
    ("split_ratio", lambda v: v > 0, "the talker run holds out no validation data"),
    ("resume_from_checkpoint", lambda v: bool(v), "the talker run saves once, at the end, with no optimizer state"),
    ("fsdp", lambda v: v, "the talker trains on one process"),
    ("deepspeed", lambda v: bool(v), "the talker trains on one process"),
    ("gradient_checkpointing", lambda v: v, "the talker trains without gradient checkpointing"),
    ("dtype", lambda v: v != "float32", "the talker trains in float32"),
    ("lr_scheduler", lambda v: v not in ("cosine", "constant"), "the talker trains at a constant learning rate"),
    ("warmup_ratio", lambda v: v > 0, "the talker trains at a constant learning rate"),
    ("weight_decay", lambda v: v != 0, "the talker trains with AdamW without weight decay"),
)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def check_train_part(cfg: Any, options: Mapping[str, Any], model_dir: str) -> None:
    """Refuse a ``--train-part`` run this plugin cannot train, before anything heavy loads (no torch here).

    Raises:
        SwiftcoreError: the checkpoint is no Qwen3-Omni (or has no talker for ``talker``/``all``), the tuner would
            drop the talker, the talker trainer does not support an option given, or a talker row is invalid.
    """
    from swiftcore.api.models import read_hf_config

    part = options.get("train_part")
    if not part:
        return
    config = read_hf_config(model_dir) or {}
    model_type = config.get("model_type")
    if model_type not in ("qwen3_omni_moe", "qwen3_omni_moe_thinker"):
        raise SwiftcoreError(
            f"--train-part {part}: {model_dir} is a {model_type!r} checkpoint; --train-part picks the part of a "
            "Qwen3-Omni checkpoint (model_type qwen3_omni_moe) that trains: drop it for this model"
        )
    talker = model_type == "qwen3_omni_moe" and "talker_config" in config and config.get("enable_audio_output", True)
    if part in ("talker", "all") and not talker:
        raise SwiftcoreError(
            f"--train-part {part}: {model_dir} has no talker (a thinker-only checkpoint, or enable_audio_output "
            "false); train it with --train-part thinker, or start from a whole Qwen3-Omni checkpoint"
        )
    if part in ("thinker", "all") and talker and cfg.tuner == "full":
        raise SwiftcoreError(
            f"--train-part {part} --tuner full: a fully fine-tuned thinker is saved alone, without the talker, so "
            "the checkpoint could not speak; use --tuner lora (the adapter applies to the whole checkpoint, its "
            "talker included), or drop --train-part for a thinker-only checkpoint"
        )
    if part == "talker" and cfg.tuner != "full":
        raise SwiftcoreError(
            f"--train-part talker --tuner {cfg.tuner}: the talker is fully fine-tuned (LoRA on the talker is not "
            "supported); pass --tuner full"
        )
    if part in ("talker", "all"):
        _check_talker_run(cfg, options, part)


def _check_talker_run(cfg: Any, options: Mapping[str, Any], part: str) -> None:
    """The options the talker trainer cannot honour, and its rows (read and checked, naming file and line)."""
    from swiftcore_plugin_qwen3_omni.talker import read_talker_rows

    # With `all`, the thinker's run reads the packing/batch/validation options; the talker's refuses the rest.
    thinker_reads = {"packing", "padding_free", "batch_size", "gradient_accumulation_steps", "val_dataset",
                     "split_ratio", "gradient_checkpointing", "lr_scheduler", "warmup_ratio", "weight_decay",
                     "dtype"} if part == "all" else set()  # fmt: skip
    for name, given, why in _TALKER_UNSUPPORTED:
        value = getattr(cfg, name)
        if name not in thinker_reads and given(value):
            shown = "" if isinstance(value, bool) else f" {value}"
            raise SwiftcoreError(
                f"--train-part {part}: {_flag(name)}{shown} is not supported for the talker ({why}); drop it"
            )
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise SwiftcoreError(
            f"--train-part {part}: the talker trains on one process; run it without torchrun / --nproc-per-node"
        )
    for name in ("eval_every", "eval_dataset", "agent_template"):
        if options.get(name):
            raise SwiftcoreError(f"--train-part {part}: {_flag(name)} is not supported for the talker; drop it")
    if int(options.get("sequence_parallel_size") or 1) > 1:
        raise SwiftcoreError(f"--train-part {part}: --sequence-parallel-size is not supported for the talker; drop it")
    for source in cfg.dataset:
        path = str(source)
        if path.startswith("hf:") or "#" in path:
            raise SwiftcoreError(
                f"--dataset {path}: the talker reads local JSONL files of {{'text' or 'messages', 'codes'}} rows "
                "(no hf: sources, no #RATIO)"
            )
        if not Path(path).is_file():
            raise SwiftcoreError(f"--dataset {path}: no such file")
        read_talker_rows(path)


def _talker_rows(cfg: Any) -> list[dict[str, Any]]:
    from swiftcore_plugin_qwen3_omni.talker import read_talker_rows

    return [row for source in cfg.dataset for row in read_talker_rows(str(source))]


def run_train_part(cfg: Any, options: Mapping[str, Any], plugins: Any) -> Any:
    """Train the talker (``talker``), or the talker then a LoRA adapter of the thinker on it (``all``); None for
    ``thinker`` or no ``--train-part`` (the ``sft`` recipe trains those itself).

    Returns:
        The run's ``swiftcore_train.TrainResult`` (``all``: the thinker's, whose adapter's base is the talker's
        checkpoint), or None.
    """
    part = options.get("train_part")
    if part == "talker":
        return train_talker_run(cfg, plugins)
    if part != "all":
        return None
    from swiftcore_train import run_training

    talker = train_talker_run(cfg, plugins)
    log.info("--train-part all: talker trained (%s); now a LoRA adapter of the thinker on it", talker.last_checkpoint)
    thinker_cfg = dataclasses.replace(
        cfg,
        model=str(talker.last_checkpoint),
        output_dir=str(Path(cfg.output_dir) / "thinker"),
        # "thinker": the sft recipe trains it, this plugin does not take the run over again.
        recipe_options={**cfg.recipe_options, "train_part": "thinker"},
    )
    return run_training(thinker_cfg, plugins)


def train_talker_run(cfg: Any, plugins: Any) -> Any:
    """Train the talker of ``cfg.model`` on ``cfg.dataset``'s codec rows into ``cfg.output_dir/checkpoint-N``.

    The output directory is prepared as every ``swiftcore train`` run's is (an empty directory, or
    ``--overwrite-output-dir``; ``args.json``), ``logs.jsonl`` gets the loss every ``--logging-steps`` steps, and
    ``loss.png`` is drawn unless ``--no-plot``.

    Returns:
        A ``swiftcore_train.TrainResult``.
    """
    from swiftcore_train import TrainResult, plot_loss_curve, start_run

    from swiftcore.api.models import resolve_model_spec
    from swiftcore_plugin_qwen3_omni.talker import train_talker

    output_dir = Path(cfg.output_dir)
    spec = resolve_model_spec(cfg.model, plugins, model_type=cfg.model_type)
    rows = _talker_rows(cfg)
    steps = cfg.max_steps if cfg.max_steps > 0 else max(1, math.ceil(cfg.num_train_epochs * len(rows)))
    record = start_run(cfg, output_dir, spec, plugins, fresh=True, train_part="talker")
    log_file = output_dir / "logs.jsonl"
    log.info("--train-part talker: %d steps on %d rows, thinker and Code2Wav frozen", steps, len(rows))

    def logged(step: int, loss: float) -> None:
        if step % cfg.logging_steps == 0 or step == steps:
            with log_file.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps({"step": step, "epoch": step / len(rows), "loss": loss}) + "\n")

    # Saved (model and tokenizer) next to the final name, then renamed: a checkpoint-N directory is always complete.
    checkpoint = output_dir / f"checkpoint-{steps}"
    staging = output_dir / ".staging" / checkpoint.name
    shutil.rmtree(staging, ignore_errors=True)
    result = train_talker(
        cfg.model, rows, staging, steps=steps, learning_rate=cfg.learning_rate, seed=cfg.seed, on_step=logged
    )
    (staging / "swiftcore_args.json").write_text(json.dumps(record, indent=2), encoding="utf-8")
    staging.rename(checkpoint)
    shutil.rmtree(output_dir / ".staging", ignore_errors=True)
    plot = plot_loss_curve(log_file, output_dir / "loss.png") if cfg.plot else None
    return TrainResult(
        output_dir=output_dir,
        last_checkpoint=checkpoint,
        log_file=log_file,
        plot_file=plot,
        train_samples=len(rows),
        global_step=steps,
        final_loss=result.losses[-1],
    )
