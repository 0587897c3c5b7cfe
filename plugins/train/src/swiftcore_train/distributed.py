"""Sharded data parallelism for the transformers trainer: ``--fsdp`` (torch FSDP2) and ``--deepspeed`` (ZeRO).

Both go through transformers' ``TrainingArguments`` (``fsdp``/``fsdp_config``, ``deepspeed``) and accelerate, so
the Trainer wraps, saves and resumes the model as it does for any transformers user; this module only builds
those arguments and refuses, before any process group starts, what cannot run.

- ``--fsdp``: FSDP2 (``fully_shard``, ``fsdp_version`` 2), one shard per decoder layer (the model's
  ``_no_split_modules``). Checkpoints hold the sharded model and optimizer (``pytorch_model_fsdp_0/``,
  ``optimizer_0/``, torch distributed checkpoints) that resume exactly, and the full model gathered on rank 0
  as a plain transformers checkpoint (``model.safetensors`` or ``adapter_model.safetensors``).
- ``--deepspeed zero2|zero3|FILE``: a generated ZeRO config, or the user's JSON file, checked field by field.
  DeepSpeed runs on CPUs too (its CPU accelerator, over gloo); its shared-memory all-reduce op, which only its
  inference path calls, is not compiled for training (:func:`_skip_inference_all_reduce_op`).

No torch at import time.
"""

from __future__ import annotations

import atexit
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swiftcore.api import SwiftcoreError

if TYPE_CHECKING:
    from swiftcore_train.config import TrainConfig

__all__ = [
    "DEEPSPEED_STAGES",
    "check_launch",
    "deepspeed_config",
    "finish_ranks",
    "fsdp_config",
    "sharding_arguments",
    "validate_deepspeed_file",
]

#: ``--deepspeed NAME`` -> ZeRO stage of the generated config.
DEEPSPEED_STAGES = {"zero2": 2, "zero3": 3}

#: Keys of a DeepSpeed config that must agree with swiftcore's own flags ("auto" lets transformers fill them in).
_MUST_MATCH = {
    "train_micro_batch_size_per_gpu": ("batch_size", "--batch-size"),
    "gradient_accumulation_steps": ("gradient_accumulation_steps", "--gradient-accumulation-steps"),
    "gradient_clipping": ("max_grad_norm", "--max-grad-norm"),
}


def fsdp_config(cfg: TrainConfig) -> dict[str, Any]:
    """transformers' ``fsdp_config`` for ``--fsdp``: FSDP2, layer-wise auto wrap, sharded checkpoints.

    ``--fsdp-offload`` keeps parameters, gradients and optimizer state on the CPU between uses (FSDP2's
    ``CPUOffloadPolicy``): it saves accelerator memory and costs host-device copies every step.
    """
    return {
        "version": 2,
        "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",  # one shard group per _no_split_modules block
        "reshard_after_forward": True,
        "state_dict_type": "SHARDED_STATE_DICT",
        "cpu_offload": cfg.fsdp_offload,
        "cpu_ram_efficient_loading": False,
    }


def deepspeed_config(stage: int) -> dict[str, Any]:
    """The DeepSpeed config ``--deepspeed zero2|zero3`` generates for ZeRO ``stage``.

    Sizes and precisions are ``"auto"``: transformers fills them from the training arguments
    (``--batch-size``, ``--gradient-accumulation-steps``, ``--max-grad-norm``, ``--dtype``), so they cannot
    disagree. The optimizer and schedule stay the Trainer's (AdamW and ``--lr-scheduler``), as without DeepSpeed.
    ZeRO-3 gathers the full 16-bit weights into each checkpoint, so every checkpoint loads in transformers.
    """
    if stage not in (2, 3):
        raise ValueError(f"ZeRO stage {stage!r}: swiftcore generates stages 2 and 3")
    zero: dict[str, Any] = {
        "stage": stage,
        "overlap_comm": False,
        "contiguous_gradients": True,
        "reduce_bucket_size": "auto",
    }
    if stage == 3:
        zero.update(
            stage3_prefetch_bucket_size="auto",
            stage3_param_persistence_threshold="auto",
            stage3_gather_16bit_weights_on_model_save=True,
        )
    else:
        zero.update(allgather_partitions=True, allgather_bucket_size=int(2e8), reduce_scatter=True)
    return {
        "bf16": {"enabled": "auto"},
        "fp16": {"enabled": "auto"},
        "zero_optimization": zero,
        "zero_allow_untested_optimizer": True,  # the Trainer's torch AdamW
        "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto",
        "train_batch_size": "auto",
        "train_micro_batch_size_per_gpu": "auto",
        "steps_per_print": 1_000_000,  # swiftcore's own log (logs.jsonl) reports the steps
        "wall_clock_breakdown": False,
    }


def validate_deepspeed_file(path: str | os.PathLike[str], cfg: TrainConfig | None = None) -> dict[str, Any]:
    """Read and check a ``--deepspeed FILE`` config; every problem is reported at once, each naming its field.

    Checked: the file is a JSON object; ``zero_optimization`` is an object whose ``stage`` is 0-3; a
    ``bf16``/``fp16`` section is an object; batch, accumulation and clipping values are ``"auto"`` or equal to
    swiftcore's flags (``cfg``); ``fp16`` and ``bf16`` are not both enabled, and agree with ``--dtype``.

    Returns:
        The parsed config.

    Raises:
        SwiftcoreError: the file is missing, not JSON, or has invalid fields.
    """
    where = f"--deepspeed {str(path)!r}"
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SwiftcoreError(f"{where}: no such file; give zero2, zero3 or a DeepSpeed JSON config file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SwiftcoreError(f"{where}: cannot be read ({exc})") from exc
    except ValueError as exc:
        raise SwiftcoreError(f"{where}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise SwiftcoreError(f"{where}: expected a JSON object (a DeepSpeed config), got {type(data).__name__}")
    problems = []
    zero = data.get("zero_optimization")
    if zero is None:
        problems.append('zero_optimization: missing; add {"stage": 2} (or 3), or use --deepspeed zero2|zero3')
    elif not isinstance(zero, dict):
        problems.append(f"zero_optimization: {zero!r} is not an object")
    else:
        stage = zero.get("stage", 0)
        if isinstance(stage, bool) or stage not in (0, 1, 2, 3):
            problems.append(f"zero_optimization.stage: {stage!r} is not one of 0, 1, 2, 3")
    enabled = {}
    for key in ("bf16", "fp16"):
        section = data.get(key)
        if section is None:
            continue
        if not isinstance(section, dict):
            problems.append(f'{key}: {section!r} is not an object (e.g. {{"enabled": "auto"}})')
            continue
        value = section.get("enabled", False)
        if value not in (True, False, "auto"):
            problems.append(f'{key}.enabled: {value!r} is not true, false or "auto"')
        enabled[key] = value
    if enabled.get("bf16") is True and enabled.get("fp16") is True:
        problems.append('bf16.enabled and fp16.enabled: both true; enable one (or set both to "auto")')
    if cfg is not None:
        wanted = {"bfloat16": "bf16", "float16": "fp16"}.get(cfg.dtype)
        for key, value in enabled.items():
            if value is True and key != wanted:
                problems.append(
                    f'{key}.enabled: true, but --dtype is {cfg.dtype}; set it to "auto" or pass the matching --dtype'
                )
        for key, (name, flag) in _MUST_MATCH.items():
            if key in data and data[key] != "auto" and data[key] != getattr(cfg, name):
                problems.append(f'{key}: {data[key]!r} differs from {flag} {getattr(cfg, name)}; set it to "auto"')
    if problems:
        raise SwiftcoreError(f"{where}: invalid DeepSpeed config:\n  " + "\n  ".join(problems))
    return data


def _deepspeed_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("deepspeed") is not None


def _accelerator() -> str | None:
    """The accelerator torch sees (``cuda``, ``xpu``, ``npu``, ...), None on a CPU-only machine."""
    import torch

    if torch.cuda.is_available():
        return "cuda"
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and accelerator.is_available():
        return str(accelerator.current_accelerator())
    return None


def check_launch(cfg: TrainConfig, world_size: int) -> None:
    """Refuse a sharded run that cannot work, before any process group starts (the launcher calls it, and every
    rank again through :func:`sharding_arguments`).

    Args:
        cfg: the run's config (already :meth:`~swiftcore_train.config.TrainConfig.validate`-d).
        world_size: the number of training processes (``--nproc-per-node`` or torchrun's ``WORLD_SIZE``).

    Raises:
        SwiftcoreError: ``--fsdp`` or ``--deepspeed zero2|zero3`` on one process (nothing to shard);
            ``--fsdp-offload`` without an accelerator; an invalid ``--deepspeed FILE``; ``--deepspeed`` without the
            deepspeed package.
    """
    if cfg.fsdp and world_size < 2:
        raise SwiftcoreError(
            "--fsdp shards the model over several processes and this run has one: add --nproc-per-node N (N >= 2), "
            "or run under torchrun with several processes; on one process, train without --fsdp"
        )
    if cfg.fsdp_offload and _accelerator() is None:
        raise SwiftcoreError(
            "--fsdp-offload moves FSDP shards from the accelerator to CPU memory, and this machine has no accelerator "
            "(the shards already are in CPU memory): drop --fsdp-offload"
        )
    if cfg.deepspeed in DEEPSPEED_STAGES and world_size < 2:
        what = "optimizer state and parameters" if cfg.deepspeed == "zero3" else "optimizer state and gradients"
        raise SwiftcoreError(
            f"--deepspeed {cfg.deepspeed} shards {what} "
            "over several processes and this run has one: add --nproc-per-node N (N >= 2); for ZeRO-Offload on one "
            "device, pass your own config (--deepspeed FILE.json)"
        )
    if cfg.deepspeed and cfg.deepspeed not in DEEPSPEED_STAGES:
        validate_deepspeed_file(cfg.deepspeed, cfg)
    if cfg.deepspeed and not _deepspeed_available():
        raise SwiftcoreError(
            f"--deepspeed {cfg.deepspeed}: the deepspeed package is not installed; "
            "pip install 'swiftcore-train[deepspeed]', or use --fsdp (torch's FSDP2, no extra package)"
        )


def sharding_arguments(cfg: TrainConfig) -> dict[str, Any]:
    """The ``TrainingArguments`` keywords of ``--fsdp`` / ``--deepspeed`` (empty without either), after
    :func:`check_launch` for this process's world size.

    Raises:
        SwiftcoreError: see :func:`check_launch`.
    """
    if not (cfg.fsdp or cfg.deepspeed):
        return {}
    check_launch(cfg, int(os.environ.get("WORLD_SIZE", "1")))
    if cfg.fsdp:
        return {"fsdp": True, "fsdp_config": fsdp_config(cfg)}
    stage = DEEPSPEED_STAGES.get(cfg.deepspeed or "")
    if _accelerator() is None:
        _skip_inference_all_reduce_op()
    return {"deepspeed": deepspeed_config(stage) if stage else validate_deepspeed_file(str(cfg.deepspeed), cfg)}


def _skip_inference_all_reduce_op() -> None:
    """Keep DeepSpeed's CPU backend from compiling its shared-memory all-reduce op in this process.

    DeepSpeed builds that C++ op when its communication backend starts, on first use in every environment (68 s of
    two cores here, before the first step), yet only ``inference_all_reduce`` (DeepSpeed inference's tensor
    parallelism) calls it: ZeRO's collectives go through torch.distributed. DeepSpeed skips the build for an op
    marked incompatible in ``deepspeed.ops.__compatible_ops__`` (the dict its backend consults, kept in the module
    so edits persist), and falls back to the process group's all-reduce, as it does where the op cannot build.
    """
    import deepspeed.ops
    from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder

    deepspeed.ops.__compatible_ops__[ShareMemCommBuilder.NAME] = False


def finish_ranks() -> None:
    """After a run under torchrun: wait until every rank is done, and destroy the process group when the process
    exits (torch's advice for every process that made one; the transformers Trainer never does).

    Rank 0 writes the last outputs (the export, the plot, the summary) after the other ranks' last collective; a
    rank that exited then would close its connections under a group still in use. The group lives until exit, not
    just until this run's end: a process may run another ``swiftcore train`` on the same ranks (one world for a
    list of runs), and accelerate keeps the group it made for the next. Nothing happens outside torchrun.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    dist.barrier()
    atexit.unregister(_destroy_default_group)  # once per process, however many runs it made
    atexit.register(_destroy_default_group)


def _destroy_default_group() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
