"""transformers' Trainer with atomic checkpoints, and the callbacks swiftcore adds (jsonl log, loss plot).

The Trainer (and accelerate under it) is used as is, so torchrun / DDP / FSDP / DeepSpeed work unchanged.
What differs: a checkpoint is written under ``output_dir/.staging/`` and renamed into place when complete,
so a killed run never leaves a half-written ``checkpoint-N`` that ``--resume-from-checkpoint`` would pick;
and resuming names a missing checkpoint or a tuner mismatch instead of failing inside transformers.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from transformers import Trainer, TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from swiftcore.api import SwiftcoreError

if TYPE_CHECKING:
    from swiftcore_train.config import TrainConfig

__all__ = ["SwiftTrainer", "JsonlLogCallback", "STAGING_DIR", "plot_loss_curve"]

STAGING_DIR = ".staging"
#: Files that hold a checkpoint's full model weights, and those that hold a peft adapter's.
_FULL_WEIGHTS = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
_ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")


def training_arguments(
    cfg: TrainConfig, output_dir: str | Path, *, evaluate: bool, args_class: type | None = None, **overrides: Any
) -> Any:
    """transformers ``TrainingArguments`` from a :class:`~swiftcore_train.config.TrainConfig`.

    One mapping for every recipe (causal LM, heads, TRL's preference and RL trainers), so a flag means the same
    everywhere.

    Args:
        cfg: the training config.
        output_dir: where the run writes.
        evaluate: whether there is validation data to evaluate every ``cfg.eval_steps``.
        args_class: a ``TrainingArguments`` subclass to build instead (TRL's ``DPOConfig``, ``GRPOConfig``, ...):
            every common flag is passed explicitly, so the subclass's own defaults (TRL's learning rate,
            gradient checkpointing, bf16) never stand in for a swiftcore flag.
        **overrides: recipe-specific arguments (e.g. ``save_only_model``, ``label_names``, a TRL field).
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
    from swiftcore_train.distributed import sharding_arguments

    args.update(sharding_arguments(cfg))  # --fsdp / --deepspeed (refused here when they cannot run)
    args.update(overrides)
    return (args_class or TrainingArguments)(**args)


class _CheckpointVersion:
    """Stands in for ``PreTrainedConfig`` while ``Trainer._load_from_checkpoint`` reads a checkpoint's version.

    transformers parses the checkpoint's ``config.json`` with the *base* config class only to compare
    ``transformers_version`` with its own; the base class's generic validators reject family values
    (DeepSeek-V4's ``mlp_layer_types: ["hash_moe", ...]``) that the family's own config class accepts,
    so resuming a full checkpoint crashed. Reading the one field as JSON can fail on no family.
    """

    @staticmethod
    def from_json_file(path: str | os.PathLike[str]) -> SimpleNamespace:
        """The ``transformers_version`` recorded in ``path``; None if unreadable (it only feeds a warning)."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = None
        return SimpleNamespace(
            transformers_version=data.get("transformers_version") if isinstance(data, dict) else None
        )


def _has_any(directory: Path, names: tuple[str, ...]) -> bool:
    return any((directory / name).is_file() for name in names)


def _checkpoint_keys(checkpoint: Path) -> set[str] | None:
    """The tensor names a full checkpoint stores, read from the safetensors headers (no tensor is loaded).

    None for a ``.bin`` checkpoint (its names cost a full load to read).
    """
    index = checkpoint / "model.safetensors.index.json"
    if index.is_file():
        return set(json.loads(index.read_text(encoding="utf-8")).get("weight_map", {}))
    single = checkpoint / "model.safetensors"
    if not single.is_file():
        return None
    from safetensors import safe_open

    with safe_open(str(single), framework="pt") as handle:
        return set(handle.keys())


def _load_fsdp2_optimizer(
    fsdp_plugin: Any, accelerator: Any, optimizer: Any, model: Any, input_dir: str, **_: Any
) -> None:
    """accelerate's ``load_fsdp_optimizer`` for an FSDP2 sharded checkpoint, for parameters that never had a gradient.

    AdamW keeps no state for a trainable parameter that never received a gradient (a tower a text-only run never
    reaches), so the saved optimizer has none for it; but torch's ``get_optimizer_state_dict`` on the fresh optimizer
    of the resuming run first creates state for *every* parameter, and the checkpoint load then fails on the first
    missing key. Only the parameters the checkpoint holds state for are read; the others are left without state, as
    they were in the interrupted run, so the resumed steps equal the uninterrupted ones.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_optimizer_state_dict,
        set_optimizer_state_dict,
    )

    directory = Path(input_dir) / "optimizer_0"  # accelerate's save_fsdp_optimizer: f"{OPTIMIZER_NAME}_{index}"
    reader = dcp.FileSystemReader(str(directory))
    stored = set(reader.read_metadata().state_dict_metadata)
    accelerator.wait_for_everyone()
    state = get_optimizer_state_dict(model, optimizer)
    state["state"] = {
        fqn: values
        for fqn, values in state["state"].items()
        if all(f"optimizer.state.{fqn}.{key}" in stored for key in values)
    }
    wrapped = {"optimizer": state}
    dcp.load(state_dict=wrapped, storage_reader=reader)
    # strict=False: torch's own switch for exactly this case (a parameter with no saved state).
    set_optimizer_state_dict(model, optimizer, wrapped["optimizer"], options=StateDictOptions(strict=False))
    accelerator.wait_for_everyone()


class SwiftTrainer(Trainer):
    """A :class:`transformers.Trainer` whose checkpoints appear atomically (write, then rename).

    Resuming (``train(resume_from_checkpoint=...)``) is checked first: ``True`` with no checkpoint in the
    output directory, a path that is no directory, or a checkpoint of the other tuner (LoRA vs full) is a
    :class:`~swiftcore.api.SwiftcoreError` naming the directory and what to do.
    """

    _staging_save = False
    #: file name -> text, written into every checkpoint before it is renamed into place.
    checkpoint_extras: dict[str, str] = {}

    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any) -> Any:
        """:meth:`transformers.Trainer.train`, with ``resume_from_checkpoint`` resolved and checked first."""
        if resume_from_checkpoint is True:
            from swiftcore_train.output_dir import last_checkpoint

            last = last_checkpoint(self.args.output_dir)
            if last is None:
                raise SwiftcoreError(
                    f"--resume-from-checkpoint latest: no {PREFIX_CHECKPOINT_DIR}-N directory in "
                    f"{self.args.output_dir}; pass the checkpoint directory itself, or drop the option to start a "
                    "fresh run"
                )
            resume_from_checkpoint = str(last)
        if isinstance(resume_from_checkpoint, str):
            self._check_resumable(Path(resume_from_checkpoint))
        return super().train(resume_from_checkpoint, *args, **kwargs)

    def compute_loss(self, model: Any, inputs: dict, *args: Any, **kwargs: Any) -> Any:
        """:meth:`transformers.Trainer.compute_loss`, the forward called with the ``forward_kwargs`` the
        ``compute_loss_func`` asks for (:class:`~swiftcore_train.loss.ChunkedCausalLMLoss`: hidden states, no
        full logits) when the batch has labels."""
        extra = getattr(self.compute_loss_func, "forward_kwargs", None)
        if extra and "labels" in inputs:
            inputs = {**inputs, **extra}
        return super().compute_loss(model, inputs, *args, **kwargs)

    def _check_resumable(self, checkpoint: Path) -> None:
        """Refuse what transformers would fail on with a bare ValueError deep inside ``train``."""
        if not checkpoint.is_dir():
            raise SwiftcoreError(
                f"--resume-from-checkpoint {str(checkpoint)!r} is not a directory; give 'latest' (the newest "
                f"{PREFIX_CHECKPOINT_DIR}-N in --output-dir) or a {PREFIX_CHECKPOINT_DIR}-N directory"
            )
        if not (checkpoint / "trainer_state.json").is_file():
            raise SwiftcoreError(
                f"--resume-from-checkpoint {str(checkpoint)!r}: no trainer_state.json, so it is no training "
                f"checkpoint ({PREFIX_CHECKPOINT_DIR}-N of a swiftcore train run); to start a new run from its "
                "weights, pass it as --model instead"
            )
        sharded_by = (
            "--fsdp"
            if any(checkpoint.glob("pytorch_model_fsdp_*"))
            else "--deepspeed"
            if (checkpoint / "latest").is_file() and any(checkpoint.glob("global_step*"))
            else None
        )
        running = "--fsdp" if self.is_fsdp_enabled else "--deepspeed" if self.is_deepspeed_enabled else None
        if sharded_by != running:
            saved = f"was saved by a {sharded_by} run" if sharded_by else "holds no sharded optimizer state"
            raise SwiftcoreError(
                f"--resume-from-checkpoint {str(checkpoint)!r} {saved}, and this run uses "
                f"{running or 'neither --fsdp nor --deepspeed'}: resume it as it was trained"
                f"{f' ({sharded_by} with --nproc-per-node N)' if sharded_by else f' (without {running})'}, or start a "
                f"new run from its weights with --model {checkpoint} and no --resume-from-checkpoint"
            )
        lora_run = hasattr(self.model, "peft_config")
        full, adapter = _has_any(checkpoint, _FULL_WEIGHTS), _has_any(checkpoint, _ADAPTER_WEIGHTS)
        if lora_run and full and not adapter:
            raise SwiftcoreError(
                f"{checkpoint} holds full model weights but this run trains a LoRA adapter; resume it with "
                "--tuner full (as it was trained), or start a LoRA run from it with --model "
                f"{checkpoint} and no --resume-from-checkpoint"
            )
        if not lora_run and adapter and not full:
            raise SwiftcoreError(
                f"{checkpoint} holds a LoRA adapter but this run is --tuner full; "
                "resume it with --tuner lora (as it was trained)"
            )

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
        import transformers.trainer as hf_trainer

        target = self.model if model is None else model
        if not (self.is_fsdp_enabled or self.is_deepspeed_enabled or hasattr(target, "peft_config")):
            stored = _checkpoint_keys(Path(resume_from_checkpoint))
            if stored is not None and stored - set(target.state_dict()):
                self._load_converted(target, Path(resume_from_checkpoint))
                return

        if not hasattr(hf_trainer, "PreTrainedConfig"):  # a transformers that no longer parses it
            super()._load_from_checkpoint(resume_from_checkpoint, model)
            return
        # Swapped for this call only (see _CheckpointVersion); the weights load below it is untouched.
        saved = hf_trainer.PreTrainedConfig
        hf_trainer.PreTrainedConfig = _CheckpointVersion
        try:
            super()._load_from_checkpoint(resume_from_checkpoint, model)
        finally:
            hf_trainer.PreTrainedConfig = saved

    @staticmethod
    def _load_converted(model: Any, checkpoint: Path) -> None:
        """Load a full checkpoint saved in the family's original weight layout into ``model`` in place.

        transformers renames or fuses some families' weights on load (DeepSeek-V4, MoE experts) and
        reverts that in ``save_pretrained``. The Trainer's own resume reads the file with a plain
        ``load_state_dict(strict=False)``, which matches none of the original names: the run would go on
        silently from the *base* weights. ``from_pretrained`` applies the conversion; its tensors are then
        copied into the parameters the optimizer already holds. Memory: one CPU copy of the weights, as the
        Trainer's own path takes.
        """
        dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), None)
        loaded = type(model).from_pretrained(str(checkpoint), dtype=dtype)
        result = model.load_state_dict(loaded.state_dict(), strict=False)
        del loaded
        if result.missing_keys or result.unexpected_keys:
            odd = [*result.missing_keys, *result.unexpected_keys][:3]
            raise SwiftcoreError(
                f"{checkpoint}: its weights do not fit this model (e.g. {', '.join(odd)}); resume with the "
                "--model (and --tuner) the checkpoint was trained from"
            )

    def create_accelerator_and_postprocess(self) -> None:
        """transformers' accelerator set-up; on CPU ranks, ``--fsdp`` is made to take effect.

        accelerate turns its FSDP plugin on for accelerator back ends only: on CPUs (``MULTI_CPU``, gloo) it drops
        the plugin without a word and the run silently trains as DDP. torch's FSDP2 (``fully_shard``) itself runs on
        CPU tensors over gloo, so the plugin is put back in place here, as accelerate would have on GPUs.
        """
        super().create_accelerator_and_postprocess()
        if not self.args.fsdp or getattr(self, "is_fsdp_enabled", False):  # set by the call above
            return
        from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

        state = self.accelerator.state
        if state.distributed_type != DistributedType.MULTI_CPU:
            raise SwiftcoreError(
                f"--fsdp: accelerate set this run up as {state.distributed_type}, not FSDP; run it under torchrun "
                "with several processes (--nproc-per-node N)"
            )
        from accelerate.state import PartialState

        state.distributed_type = DistributedType.FSDP
        # Every later AcceleratorState() copies PartialState's fields over its own, as accelerate's own set-up
        # records FSDP there too.
        PartialState._shared_state["distributed_type"] = DistributedType.FSDP
        state.fsdp_plugin = FullyShardedDataParallelPlugin(**self.args.fsdp_plugin_args)
        self.is_fsdp_enabled = True

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        if not (checkpoint and self.is_fsdp_enabled and self.accelerator.is_fsdp2):
            super()._load_optimizer_and_scheduler(checkpoint)
            return
        import transformers.trainer as hf_trainer

        # Swapped for this call only (see _load_fsdp2_optimizer); the scheduler and RNG loads are untouched.
        saved = hf_trainer.load_fsdp_optimizer
        hf_trainer.load_fsdp_optimizer = _load_fsdp2_optimizer
        try:
            super()._load_optimizer_and_scheduler(checkpoint)
        finally:
            hf_trainer.load_fsdp_optimizer = saved

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """:meth:`transformers.Trainer.save_model`; under ``--fsdp`` (sharded checkpoints) the full model is also
        gathered to rank 0 and saved as a plain transformers checkpoint (or peft adapter), so every checkpoint
        loads in transformers as it does without FSDP. Collective: every rank calls it."""
        if self.is_fsdp_enabled and "SHARDED_STATE_DICT" in str(self.accelerator.state.fsdp_plugin.state_dict_type):
            state_dict = self.accelerator.get_state_dict(self.model)  # full tensors, on rank 0's CPU
            if self.args.should_save:
                self._save(output_dir or self.args.output_dir, state_dict=state_dict)
            return
        super().save_model(output_dir, _internal_call)

    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        if state_dict is not None and (self.is_fsdp_enabled or self.is_deepspeed_enabled):
            # Gathered (FSDP) or cloned (DeepSpeed) tensors share no storage, so save_pretrained cannot see tied
            # weights (lm_head tied to the embeddings) and would store both: drop the tied copies, as a save of the
            # unsharded model does.
            tied = getattr(self.accelerator.unwrap_model(self.model), "all_tied_weights_keys", None) or {}
            state_dict = {k: v for k, v in state_dict.items() if not (k in tied and tied[k] in state_dict)}
        super()._save(output_dir, state_dict)

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
        except OSError as exc:  # disk full, quota, permissions: the earlier checkpoints stay as they were
            if self.args.should_save:
                shutil.rmtree(staging, ignore_errors=True)
            raise SwiftcoreError(
                f"saving {name} in {run_dir} failed ({exc.strerror or exc}); nothing was written under that name "
                "and the earlier checkpoints are intact: free space and continue with --resume-from-checkpoint latest"
            ) from exc
        finally:
            self._staging_save = False
        if self.args.world_size > 1:
            import torch.distributed as dist

            # Every rank writes its own RNG state (rng_state_{rank}.pth) into the staging checkpoint: rank 0 may
            # move it into place only once all have, or a rank writes into a directory that is gone (and crashes)
            # and the checkpoint lacks its RNG state.
            dist.barrier()
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

            # The best checkpoint (--best-metric) is kept by the rotation, as transformers' own rotation keeps it.
            protected = self.state.best_model_checkpoint or next(
                (p for c in self.callback_handler.callbacks if (p := getattr(c, "protected_checkpoint", None))), None
            )
            rotate_checkpoints(
                output_dir=run_dir,
                save_total_limit=self.args.save_total_limit,
                best_model_checkpoint=protected,
                use_mtime=False,
            )
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
    """Draw training (and eval) loss against step from ``logs.jsonl`` into a PNG; None if nothing to draw.

    In-training accuracy (``eval_accuracy``, from ``--eval-every``) is drawn on a second axis, the best checkpoint
    (``best_checkpoint``) marked on it.
    """
    rows = [json.loads(line) for line in Path(log_path).read_text().splitlines() if line.strip()]
    train = [(r["step"], r["loss"]) for r in rows if "loss" in r]
    evals = [(r["step"], r["eval_loss"]) for r in rows if "eval_loss" in r]
    accuracy = [(r["step"], r["eval_accuracy"]) for r in rows if "eval_accuracy" in r]
    best = next((r for r in reversed(rows) if "best_checkpoint" in r), None)
    if not train and not evals and not accuracy:
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
    handles, labels = ax.get_legend_handles_labels()
    if accuracy:
        acc_ax = ax.twinx()
        acc_ax.plot(*zip(*accuracy), color="tab:green", marker="s", label="eval accuracy")
        if best is not None:
            step = next((r["step"] for r in rows if r.get("eval_checkpoint") == best["best_checkpoint"]), None)
            if step is not None:
                acc_ax.plot([step], [best["best_value"]], "*", color="tab:red", markersize=12, label="best checkpoint")
        acc_ax.set_ylabel("eval accuracy")
        acc_ax.set_ylim(-0.02, 1.02)
        more_handles, more_labels = acc_ax.get_legend_handles_labels()
        handles, labels = handles + more_handles, labels + more_labels
    ax.legend(handles, labels, loc="best")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out_path, dpi=100)
    plt.close(fig)
    return Path(out_path)
