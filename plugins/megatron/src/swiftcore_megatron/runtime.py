"""Run megatron-core models in this process: process group, model-parallel state, RNG, on CPU or GPU."""

from __future__ import annotations

import os
import socket
import warnings
from typing import Any

__all__ = ["free_port", "init_model_parallel", "load_into_model", "mcore_logits"]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for a local gloo rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def init_model_parallel(
    tp: int = 1,
    ep: int = 1,
    *,
    pp: int = 1,
    seed: int = 1234,
    rank: int = 0,
    world_size: int = 1,
    vpp: int = 1,
    cp: int = 1,
) -> None:
    """Initialise torch.distributed (gloo on CPU) and megatron's model-parallel state, once per process.

    A single process needs no launcher: MASTER_ADDR/PORT default to 127.0.0.1 and a free port.
    Called again with other sizes, the model-parallel state is rebuilt on the same process group.

    Args:
        tp: tensor-parallel size.
        ep: expert-parallel size.
        pp: pipeline-parallel size.
        seed: megatron's model-parallel RNG seed.
        rank: this process's rank (when not launched by torchrun).
        world_size: number of processes (when not launched by torchrun).
        vpp: model chunks per pipeline rank (virtual pipeline parallelism, megatron's interleaved schedule).
        cp: context-parallel size (each rank holds ``1/cp`` of every sequence).
    """
    # megatron warns at import that Transformer Engine/Apex are absent; the local spec does not need them.
    warnings.filterwarnings("ignore", message=".*(Transformer Engine|Apex) (and Apex )?(are|is) not installed.*")
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    from swiftcore_megatron.cpu_patches import apply_cpu_patches

    on_cpu = apply_cpu_patches()
    if not on_cpu:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
    if not dist.is_initialized():
        # Under torchrun (or a caller that set MASTER_ADDR/PORT) use the env:// rendezvous; otherwise a
        # private tcp:// address, so that no port leaks into os.environ and on to child processes.
        launched = "MASTER_ADDR" in os.environ and "MASTER_PORT" in os.environ
        dist.init_process_group(
            "gloo" if on_cpu else "nccl",
            init_method=None if launched else f"tcp://127.0.0.1:{free_port()}",
            rank=int(os.environ.get("RANK", rank)),
            world_size=int(os.environ.get("WORLD_SIZE", world_size)),
        )
    if parallel_state.model_parallel_is_initialized():
        _destroy_model_parallel()
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=tp,
        pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=vpp if vpp > 1 else None,
        context_parallel_size=cp,
        expert_model_parallel_size=ep,
    )
    # inference_rng_tracker + force_reset_rng: no CUDA RNG state calls (works on CPU).
    model_parallel_cuda_manual_seed(seed, inference_rng_tracker=True, force_reset_rng=True)
    torch.manual_seed(seed)


def _destroy_model_parallel() -> None:
    """Tear megatron's model-parallel state down, its process groups included.

    megatron's ``destroy_model_parallel`` drops its references but destroys only the data-parallel gloo groups;
    every other group it made keeps three gloo polling threads alive. Re-initialising in one long-lived process
    (the test session, a notebook) so leaked ~50 threads a call and, within a few dozen calls, whole CPU cores.
    The groups are read from megatron's own list of them (``_global_process_group_list``, kept by its
    ``create_group``); the default group, and any group megatron did not make, is left alone.
    """
    import torch.distributed as dist
    from megatron.core import parallel_state

    groups = [g for g in (getattr(parallel_state, "_global_process_group_list", None) or []) if g is not None]
    parallel_state.destroy_model_parallel()
    for group in groups:
        try:
            dist.destroy_process_group(group)
        except ValueError:  # already destroyed by destroy_model_parallel (the gloo data-parallel groups)
            pass


def load_into_model(model: Any, state: dict[str, Any]) -> None:
    """Load a converted state dict strictly (``_extra_state`` entries excepted, megatron fills them)."""
    from megatron.core.transformer.moe import moe_utils

    result = model.load_state_dict(state, strict=False)
    missing = [k for k in result.missing_keys if not k.endswith("._extra_state")]
    if missing or result.unexpected_keys:
        from swiftcore_megatron.errors import CheckpointError

        raise CheckpointError(
            f"converted weights do not fit the megatron-core model: missing {missing[:8]}, "
            f"unexpected {result.unexpected_keys[:8]}"
        )
    # The MoE logging tracker is global and sized by the first model: start clean for this one.
    moe_utils.clear_aux_losses_tracker()


def mcore_logits(model: Any, input_ids: Any) -> Any:
    """Full-vocabulary float logits ``[batch, seq, vocab]`` of a GPTModel (gathered over TP ranks), on CPU.

    On a machine with CUDA the model is moved to the current GPU first (megatron puts its rotary
    tables there); that path is untested in CI, which has no GPU.
    """
    import torch
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel import gather_from_tensor_model_parallel_region

    model.eval()
    if torch.cuda.is_available():  # megatron places rotary tables and masks on the current GPU
        model.cuda()
        input_ids = input_ids.cuda()
    positions = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0).expand_as(input_ids)
    from swiftcore_megatron.cpu_patches import eager_on_cpu

    with torch.no_grad(), eager_on_cpu():
        logits = model(input_ids=input_ids, position_ids=positions, attention_mask=None)
    if parallel_state.get_tensor_model_parallel_world_size() > 1:
        logits = gather_from_tensor_model_parallel_region(logits)
    return logits.float().cpu()
