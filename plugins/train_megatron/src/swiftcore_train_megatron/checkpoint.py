"""Checkpoints of a megatron run: the per-rank state a run resumes from, and the Hugging Face model beside it.

Layout of ``OUTPUT/checkpoint-N/``::

    config.json, model*.safetensors, tokenizer files   the trained model, as transformers loads it
    swiftcore_args.json                                 the run's arguments and manifest (as every swiftcore run)
    trainer_state.json                                  global_step, epoch, the log so far
    mcore/                                              the Megatron checkpoint (``swiftcore_megatron.checkpoint``):
        release/mp_rank_TT[_PPP][_EEE]/model_optim_rng.pt   per rank (and pipeline stage): model, optimizer,
                                                        scheduler, RNG, iteration
        swiftcore_lora.json                             with --tuner lora: the adapter's settings and layers

With ``--tuner lora`` the checkpoint holds the peft adapter (``adapter_model.safetensors``, ``adapter_config.json``
naming the base model) instead of the whole model.
        swiftcore_mcore.json, hf/, hf_passthrough/      what ``swiftcore export --to-hf`` converts it back with

Every rank writes into ``OUTPUT/.staging``; rank 0 exports the Hugging Face model from the rank files with the
family's bridge and renames the finished directory into place, so a kill at any moment leaves either the
complete ``checkpoint-N`` or none (the next run's start removes ``.staging``).

Why the legacy per-rank torch format and not ``dist_checkpointing``: megatron-core 0.16.1's ``torch_dist`` save
finalises with a CUDA tensor (``save_state_dict_async_finalize``) and cannot run on a CPU; the per-rank files are
what Megatron-LM's ``--ckpt-format torch`` reads, and the conversion code already reads them.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from swiftcore.api import SwiftcoreError

__all__ = ["MCORE_SUBDIR", "STATE_FILE", "check_resume_layout", "load_checkpoint", "save_checkpoint"]

MCORE_SUBDIR = "mcore"
STATE_FILE = "trainer_state.json"
STAGING_DIR = ".staging"


def _rank_path(root: Path, ep: int, pp: int) -> Path:
    from megatron.core import parallel_state
    from swiftcore_megatron import rank_file

    tp_rank = parallel_state.get_tensor_model_parallel_rank()
    ep_rank = parallel_state.get_expert_model_parallel_rank()
    pp_rank = parallel_state.get_pipeline_model_parallel_rank()
    return rank_file(root, tp_rank, ep_rank, ep, pp_rank=pp_rank, pp=pp)


def save_checkpoint(
    output_dir: Path,
    step: int,
    *,
    model: Any,
    optimizer: Any,
    scheduler: Any,
    bridge: Any,
    bridge_name: str,
    model_dir: str,
    ep: int,
    tp: int,
    pp: int = 1,
    lora: tuple[Any, dict[str, bool]] | None = None,
    trainer_state: dict[str, Any],
    extras: dict[str, str],
    save_total_limit: int | None,
) -> Path:
    """Write ``output_dir/checkpoint-{step}`` (see the module docstring); collective: every rank calls it.

    Raises:
        SwiftcoreError: the disk filled or refused a write; the earlier checkpoints are intact.
    """
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state

    name = f"checkpoint-{step}"
    staging = output_dir / STAGING_DIR
    mcore = staging / f"{name}.{MCORE_SUBDIR}"
    rank0 = dist.get_rank() == 0
    if rank0:
        shutil.rmtree(staging, ignore_errors=True)
        mcore.mkdir(parents=True)
    dist.barrier()
    try:
        # One copy per distinct shard: the first of a set of data-parallel replicas writes it.
        if parallel_state.get_expert_data_parallel_rank() == 0:
            path = _rank_path(mcore, ep, pp)
            path.parent.mkdir(parents=True, exist_ok=True)
            state = {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "rng_state": torch.get_rng_state(),
                "iteration": step,
                "checkpoint_version": 3.0,
            }
            torch.save(state, path)
        dist.barrier()
        if rank0:
            layout = (tp, ep, pp)
            _finish(output_dir, staging, mcore, name, bridge, bridge_name, model_dir, layout, trainer_state, extras,
                    lora)  # fmt: skip
            from transformers.trainer_utils import rotate_checkpoints

            rotate_checkpoints(output_dir=str(output_dir), save_total_limit=save_total_limit, use_mtime=False)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise SwiftcoreError(
            f"saving {name} in {output_dir} failed ({exc.strerror or exc}); nothing was written under that name and "
            "the earlier checkpoints are intact: free space and continue with --resume-from-checkpoint latest"
        ) from exc
    dist.barrier()
    return output_dir / name


def _finish(
    output_dir: Path,
    staging: Path,
    mcore: Path,
    name: str,
    bridge: Any,
    bridge_name: str,
    model_dir: str,
    layout: tuple[int, int, int],
    trainer_state: dict[str, Any],
    extras: dict[str, str],
    lora: tuple[Any, dict[str, bool]] | None,
    vpp: int = 1,
) -> None:
    """Rank 0: the Megatron checkpoint's side files, its Hugging Face export (the whole model, or with LoRA the
    peft adapter of the base model), the run's files; then the rename.

    ``layout`` is ``(tp, ep, stages)``: under ``--vpp`` the rank files are the ``pp * vpp`` stages of a plain
    pipeline (what the export reads as ``pp``), and the metadata also records ``vpp``, the run's layout for a
    resume (:func:`check_resume_layout`)."""
    from swiftcore_megatron import (
        METADATA_FILE,
        copy_hf_side_files,
        mcore_to_hf,
        write_checkpoint_extras,
        write_metadata,
    )

    tp, ep, pp = layout
    write_checkpoint_extras(mcore, model_dir, bridge, tp=tp, ep=ep, pp=pp, bridge_name=bridge_name)
    write_metadata(mcore, {**json.loads((mcore / METADATA_FILE).read_text(encoding="utf-8")), "vpp": vpp})
    hf = staging / name
    if lora is None:
        mcore_to_hf(mcore, hf, bridge)
    else:
        from swiftcore_train_megatron.lora import export_adapter, write_lora_record

        write_lora_record(mcore, *lora)
        export_adapter(mcore, hf, bridge, base_model=str(Path(model_dir).resolve()))
        # The tokenizer and chat template beside the adapter, as a transformers-engine LoRA checkpoint has them;
        # no config.json: the directory is an adapter of the base model, not a model.
        copy_hf_side_files(Path(model_dir), hf)
        (hf / "config.json").unlink(missing_ok=True)
    os.replace(mcore, hf / MCORE_SUBDIR)
    (hf / STATE_FILE).write_text(json.dumps(trainer_state, indent=2), encoding="utf-8")
    for file_name, text in extras.items():
        (hf / file_name).write_text(text, encoding="utf-8")
    final = output_dir / name
    if final.exists():  # the closing save of a step that was just saved
        shutil.rmtree(final)
    os.replace(hf, final)
    shutil.rmtree(staging, ignore_errors=True)


def _load_rank_state(path: Path) -> dict[str, Any]:
    """Read one rank file with ``weights_only=True``: tensors and plain values, never code.

    A rank file is a pickle; unpickling an arbitrary one runs whatever it names, so a checkpoint from elsewhere
    could run code at ``--resume-from-checkpoint``. What ``save_checkpoint`` writes (state dicts of tensors,
    numbers, strings, lists and dicts) needs no other class.
    """
    import pickle

    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        lines = [line for line in str(exc).splitlines() if "GLOBAL" in line or "Unsupported" in line]
        first = lines[0].strip().rstrip(".") if lines else type(exc).__name__
        raise SwiftcoreError(
            f"--resume-from-checkpoint: {path} holds more than tensors and plain values ({first}); "
            "refusing to unpickle it, as that could run code: resume only from checkpoints this tool wrote"
        ) from None
    if not isinstance(state, dict) or not {"model", "optimizer", "scheduler", "rng_state", "iteration"} <= state.keys():
        raise SwiftcoreError(f"--resume-from-checkpoint: {path} is not a rank file written by --engine megatron")
    return state


def check_resume_layout(checkpoint: Path, *, tp: int, pp: int, vpp: int, ep: int) -> None:
    """Refuse to resume ``checkpoint`` at another layout than it was saved at, naming the flags it was saved with
    (its ``swiftcore_mcore.json``: ``pp`` counts the stage files, ``pp * vpp`` under ``--vpp``). A checkpoint without
    megatron metadata is left to the loader's own message.

    Raises:
        SwiftcoreError: the layouts differ.
    """
    from swiftcore_megatron import METADATA_FILE

    path = checkpoint / MCORE_SUBDIR / METADATA_FILE
    if not path.is_file():
        return
    meta = json.loads(path.read_text(encoding="utf-8"))
    if "vpp" in meta:
        saved_vpp = int(meta["vpp"])
    else:  # written before the metadata recorded it: its pp counts pp * vpp stage files (the rank files tell more)
        saved_vpp = vpp if int(meta.get("pp", 1)) == pp * vpp else 1
    saved = {"tp": meta["tp"], "pp": int(meta.get("pp", 1)) // saved_vpp, "vpp": saved_vpp, "ep": meta["ep"]}
    mine = {"tp": tp, "pp": pp, "vpp": vpp, "ep": ep}
    if saved != mine:

        def flags(sizes: dict[str, int]) -> str:
            return " ".join(f"--{k} {v}" for k, v in sizes.items())

        raise SwiftcoreError(
            f"--resume-from-checkpoint {str(checkpoint)!r} was saved at {flags(saved)}; this run is {flags(mine)}: "
            f"resume with {flags({k: v for k, v in saved.items() if v != mine[k]})}, the layout it was saved at"
        )


def load_checkpoint(
    checkpoint: Path, *, model: Any, optimizer: Any, scheduler: Any, tp: int, ep: int, pp: int = 1
) -> int:
    """Restore this rank's model, optimizer, scheduler and RNG from ``checkpoint``; return its step.

    Raises:
        SwiftcoreError: the checkpoint has no Megatron state (a transformers-engine checkpoint), was saved at
            another ``--tp``/``--pp``/``--ep``, or its rank file holds anything but tensors and plain values.
    """
    import torch
    from swiftcore_megatron import CheckpointError, load_into_model, read_metadata

    root = checkpoint / MCORE_SUBDIR
    if not root.is_dir():
        raise SwiftcoreError(
            f"--resume-from-checkpoint {str(checkpoint)!r}: no {MCORE_SUBDIR}/ directory, so it was not saved by "
            "--engine megatron; resume it with the engine that wrote it, or pass it as --model to start anew"
        )
    try:
        read_metadata(root)
    except CheckpointError as exc:
        raise SwiftcoreError(f"--resume-from-checkpoint {str(checkpoint)!r}: {exc}") from exc
    check_resume_layout(checkpoint, tp=tp, pp=pp, vpp=1, ep=ep)
    state = _load_rank_state(_rank_path(root, ep, pp))
    load_into_model(model, state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["rng_state"])
    return int(state["iteration"])
