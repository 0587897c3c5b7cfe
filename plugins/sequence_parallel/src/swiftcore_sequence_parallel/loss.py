"""Token-weighted causal-LM loss over a sequence-parallel group, equal to the single-process loss.

A per-rank mean followed by a mean over ranks weights each rank equally, which is wrong as soon as the
shards hold different numbers of label tokens (padding, packed samples, prompts masked with -100). Here
the summed per-token loss and the label-token count are both summed over the group, and their ratio is
the loss of the whole sequence.
"""

from __future__ import annotations

from typing import Any

from swiftcore_sequence_parallel import IGNORE_INDEX

__all__ = ["sequence_parallel_loss"]


def sequence_parallel_loss(logits: Any, shift_labels: Any, group: Any = None) -> Any:
    """Mean cross-entropy over every label token of the SP group's whole sequence.

    Args:
        logits: ``[B, s, V]`` of this rank's shard.
        shift_labels: ``[B, s]`` globally shifted labels of the shard (from
            :func:`~swiftcore_sequence_parallel.sharding.shard_batch`).
        group: the SP process group (default: the active state's).

    Returns:
        A scalar with the same value on every rank. Its gradient is this rank's share only: summing the
        parameter gradients over the SP ranks (what the data-parallel all-reduce does when the SP ranks
        are in it, as a sum, not a mean) gives the gradient of the single-process loss.
    """
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from swiftcore_sequence_parallel.comm import all_reduce_sum

    if group is None:
        from swiftcore_sequence_parallel.groups import get_sequence_parallel_state

        group = get_sequence_parallel_state().group
    local_sum = F.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]),
        shift_labels.reshape(-1).to(logits.device),
        ignore_index=IGNORE_INDEX,
        reduction="sum",
    )
    count = (shift_labels != IGNORE_INDEX).sum().to(device=logits.device, dtype=torch.float32)
    if dist.get_world_size(group=group) > 1:
        dist.all_reduce(count, group=group)
    return all_reduce_sum(local_sum, group) / count.clamp(min=1.0)
