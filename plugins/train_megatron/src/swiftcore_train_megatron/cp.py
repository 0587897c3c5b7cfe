"""Context parallelism (``--cp N``): every sequence split over ``N`` ranks, as megatron-core splits it.

What the engine does around the attention, and tests on a CPU:

- :func:`shard_sequence`: each rank keeps 2 of ``2 * cp`` equal chunks of every sequence, chunks ``r`` and
  ``2 * cp - 1 - r`` (megatron's own ``get_batch_on_this_cp_rank``: under a causal mask late chunks cost more, so
  every rank gets one early and one late chunk); :func:`~swiftcore_train_megatron.engine.model_inputs` pads the
  batch to a multiple of ``2 * cp`` first (:func:`padded_length`; the padding carries no loss) and shifts the
  labels before the split.
- The loss: each rank sums the per-token loss over its own tokens; the step's loss is the sum over the data- and
  context-parallel ranks (megatron's ``dp_cp`` group, :func:`reduce_loss_sum`) divided by the step's label tokens,
  as without context parallelism; gradients are summed over the same group (``reduce_gradients``).
- Pipelines: megatron's schedule is given the whole sequence length and divides it by ``cp`` itself.

What does not run yet, so ``--cp`` above 1 is refused before any process group (:func:`check_context_parallel`):
megatron-core's context-parallel attention is Transformer Engine's ``TEDotProductAttention`` (its local
``DotProductAttention`` asserts ``context_parallel_size == 1``), which needs CUDA GPUs, and runs context-parallel
only on its flash or fused attention backends, which take fp16/bf16 inputs; this engine trains in float32.
"""

from __future__ import annotations

from typing import Any

from swiftcore.api import SwiftcoreError

__all__ = ["GPU_CHECK", "check_context_parallel", "padded_length", "reduce_loss_sum", "shard_sequence"]

#: Where context parallelism is checked on GPUs.
GPU_CHECK = "scripts/gpu_check.sh"


def check_context_parallel(cp: int) -> None:
    """Refuse ``--cp`` where megatron-core's context-parallel attention cannot run, naming what would.

    Raises:
        SwiftcoreError: always for ``cp > 1`` so far: without a CUDA GPU and ``transformer_engine`` (megatron's
            context-parallel attention is Transformer Engine's), and with them too, since Transformer Engine
            runs it only in fp16/bf16 and this engine trains in float32.
    """
    import importlib.util

    import torch

    if cp == 1:
        return
    where = "split the model with --tp/--pp instead, and use --cp 1"
    if not torch.cuda.is_available() or importlib.util.find_spec("transformer_engine") is None:
        missing = "there is no CUDA GPU" if not torch.cuda.is_available() else "transformer_engine is not installed"
        raise SwiftcoreError(
            f"--cp {cp}: megatron-core's context-parallel attention is Transformer Engine's (TEDotProductAttention), "
            f"which needs CUDA GPUs and transformer_engine, and here {missing}; context parallelism is checked on "
            f"GPUs by {GPU_CHECK}. On this machine {where}"
        )
    raise SwiftcoreError(
        f"--cp {cp}: Transformer Engine runs context-parallel attention only on its flash and fused backends "
        f"(fp16/bf16), and the megatron engine trains in float32 so far; {where}"
    )


def padded_length(length: int, cp: int) -> int:
    """``length`` rounded up to a multiple of ``2 * cp``: every rank's two chunks then have one length."""
    return -(-length // (2 * cp)) * (2 * cp)


def shard_sequence(batch: dict[str, Any], group: Any = None) -> dict[str, Any]:
    """This context-parallel rank's share of ``batch`` (tensors ``[batch, seq, ...]``): megatron-core's own split,
    ``get_batch_on_this_cp_rank``, chunks ``r`` and ``2 * cp - 1 - r`` of ``2 * cp``, concatenated.

    Args:
        batch: name -> tensor with the sequence in dimension 1, its length a multiple of ``2 * cp``.
        group: the context-parallel process group (default: megatron's, from the model-parallel state).
    """
    from megatron.core.utils import get_batch_on_this_cp_rank

    return get_batch_on_this_cp_rank(dict(batch), cp_group=group)


def reduce_loss_sum(loss_sum: Any, group: Any) -> Any:
    """``loss_sum`` (the summed loss of this rank's tokens) summed over ``group``, in place: over the data- and
    context-parallel ranks it is the summed loss of the step's whole sequences."""
    import torch.distributed as dist

    if dist.get_world_size(group) > 1:
        dist.all_reduce(loss_sum, group=group)
    return loss_sum
