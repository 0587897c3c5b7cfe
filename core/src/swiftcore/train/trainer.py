"""transformers' Trainer with atomic checkpoints, and the callbacks swiftcore adds (jsonl log, loss plot).

The Trainer (and accelerate under it) is used as is, so torchrun / DDP / FSDP / DeepSpeed work unchanged.
What differs: a checkpoint is written under ``output_dir/.staging/`` and renamed into place when complete,
so a killed run never leaves a half-written ``checkpoint-N`` that ``--resume-from-checkpoint`` would pick.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from transformers import Trainer, TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

__all__ = ["SwiftTrainer", "JsonlLogCallback", "STAGING_DIR", "plot_loss_curve"]

STAGING_DIR = ".staging"


def training_arguments(cfg: Any, output_dir: str | Path, *, evaluate: bool, **overrides: Any) -> Any:
    """transformers ``TrainingArguments`` from a :class:`~swiftcore.train.config.TrainConfig`.

    One mapping for every recipe (causal LM, heads), so a flag means the same everywhere.

    Args:
        cfg: the training config.
        output_dir: where the run writes.
        evaluate: whether there is validation data to evaluate every ``cfg.eval_steps``.
        **overrides: recipe-specific arguments (e.g. ``save_only_model``, ``label_names``).
    """
    import torch
    from transformers import TrainingArguments

    args: dict[str, Any] = dict(
        output_dir=str(output_dir),
        per_device_train_batch_size=cfg.batch_size,
        per_device_eval_batch_size=cfg.batch_size,
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        learning_rate=cfg.learning_rate,
        lr_scheduler_type=cfg.lr_scheduler,
        warmup_steps=cfg.warmup_ratio,  # a float below 1 is a fraction of the steps
        weight_decay=cfg.weight_decay,
        max_grad_norm=cfg.max_grad_norm,
        num_train_epochs=cfg.num_train_epochs,
        max_steps=cfg.max_steps,
        logging_steps=cfg.logging_steps,
        save_strategy="steps",
        save_steps=cfg.save_steps,
        save_total_limit=cfg.save_total_limit,
        eval_strategy="steps" if (evaluate and cfg.eval_steps) else "no",
        eval_steps=cfg.eval_steps,
        seed=cfg.seed,
        data_seed=cfg.seed,
        bf16=cfg.dtype == "bfloat16",
        gradient_checkpointing=cfg.gradient_checkpointing,
        report_to="none",
        remove_unused_columns=False,
        include_num_input_tokens_seen="non_padding",
        dataloader_num_workers=0,
        # Without use_cpu, transformers ignores torchrun's WORLD_SIZE on a CPU-only machine and every rank
        # trains alone on the same data; with it, accelerate sets up gloo data parallelism.
        use_cpu=not torch.cuda.is_available(),
    )
    args.update(overrides)
    return TrainingArguments(**args)


class SwiftTrainer(Trainer):
    """A :class:`transformers.Trainer` whose checkpoints appear atomically (write, then rename)."""

    _staging_save = False
    #: file name -> text, written into every checkpoint before it is renamed into place.
    checkpoint_extras: dict[str, str] = {}

    def _get_output_dir(self, trial: Any) -> str:
        run_dir = super()._get_output_dir(trial)
        return os.path.join(run_dir, STAGING_DIR) if self._staging_save else run_dir

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        run_dir = super()._get_output_dir(trial)
        name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        staging = Path(run_dir, STAGING_DIR)
        if self.args.should_save:
            shutil.rmtree(staging, ignore_errors=True)
        self._staging_save = True
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self._staging_save = False
        if self.args.should_save:
            for file_name, text in self.checkpoint_extras.items():
                (staging / name / file_name).write_text(text, encoding="utf-8")
            final = Path(run_dir, name)
            if final.exists():  # re-saving the same step (e.g. the closing save)
                shutil.rmtree(final)
            os.replace(staging / name, final)
            shutil.rmtree(staging, ignore_errors=True)
            if self.state.best_model_checkpoint and STAGING_DIR in self.state.best_model_checkpoint:
                self.state.best_model_checkpoint = str(final)
            from transformers.trainer_utils import rotate_checkpoints

            rotate_checkpoints(output_dir=run_dir, save_total_limit=self.args.save_total_limit, use_mtime=False)
        if self.args.world_size > 1:
            import torch.distributed as dist

            dist.barrier()


class JsonlLogCallback(TrainerCallback):
    """Append every log record (loss, lr, grad norm, tokens/s) to ``output_dir/logs.jsonl``."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._start = time.perf_counter()
        self._tokens_at_start: int | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._start = time.perf_counter()
        self._tokens_at_start = state.num_input_tokens_seen

    def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any) -> None:
        if not state.is_world_process_zero or not logs:
            return
        record = {"step": state.global_step, "epoch": state.epoch, **logs}
        elapsed = time.perf_counter() - self._start
        seen = state.num_input_tokens_seen - (self._tokens_at_start or 0)
        if elapsed > 0 and seen:
            record["tokens_per_second"] = round(seen / elapsed, 1)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")


def plot_loss_curve(log_path: str | Path, out_path: str | Path) -> Path | None:
    """Draw training (and eval) loss against step from ``logs.jsonl`` into a PNG; None if nothing to draw."""
    rows = [json.loads(line) for line in Path(log_path).read_text().splitlines() if line.strip()]
    train = [(r["step"], r["loss"]) for r in rows if "loss" in r]
    evals = [(r["step"], r["eval_loss"]) for r in rows if "eval_loss" in r]
    if not train and not evals:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    if train:
        ax.plot(*zip(*train), label="train loss")
    if evals:
        ax.plot(*zip(*evals), marker="o", label="eval loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out_path, dpi=100)
    plt.close(fig)
    return Path(out_path)
