"""Ring attention: keep the local queries, let the key/value shards visit every rank of the ring.

Two implementations, same result:

* ``p2p`` (a true ring pass): ``R - 1`` steps; at each, the rank attends to the key/value block it holds,
  merges it into its running output with the log-sum-exp (online softmax), and passes the block on to
  the next rank (send/recv). Blocks the causal mask hides entirely are not computed. Each block runs
  :func:`~swiftcore_sequence_parallel.kernels.low_memory_attention`, so the backward keeps every visiting
  key/value block and the block's output and log-sum-exp, but no scores: memory linear in the sequence.
* ``allgather``: gather all key/value shards (differentiable all-gather) and attend once with the global
  layout: simplest; the whole ``S``-long key/value per rank and one gather instead of ``R - 1`` passes.

Shards are contiguous, so under causal masking the last rank does the most work (no zig-zag balancing).
"""

from __future__ import annotations

from typing import Any

from swiftcore_sequence_parallel.comm import all_gather, ring_shift
from swiftcore_sequence_parallel.kernels import (
    KeyLayout,
    block_attention,
    dense_attention,
    low_memory_attention,
    merge_blocks,
)
from swiftcore_sequence_parallel.masks import allow_own_key_in_empty_rows, allowed_mask

__all__ = ["ring_attention"]


def ring_attention(
    q: Any,
    k: Any,
    v: Any,
    *,
    state: Any,
    segments: Any,
    key_valid: Any,
    causal: bool,
    sliding_window: int | None,
    scale: float,
    softcap: float | None = None,
    dropout: float = 0.0,
) -> Any:
    """Exact attention of the local queries over the keys of every rank of the ring.

    Args:
        q, k, v: ``[B, H(kv), L, D]``: this ring rank's span ``[ring_rank*L, (ring_rank+1)*L)`` of the sequence.
        state: the :class:`~swiftcore_sequence_parallel.groups.SequenceParallelState`.
        segments, key_valid: the global layout (see :mod:`~swiftcore_sequence_parallel.masks`).
        causal, sliding_window, scale, softcap, dropout: as the model's attention layer asks.

    Returns:
        ``[B, H, L, D]`` in ``q``'s dtype.
    """
    import torch

    n, me, span = state.ring_size, state.ring_rank, q.shape[2]
    q_idx = torch.arange(me * span, (me + 1) * span, device=q.device)
    opts = {"causal": causal, "sliding_window": sliding_window}
    low_memory = not dropout  # attention dropout: torch's kernels draw the dropout mask
    if state.ring_impl == "allgather":
        kv = all_gather(torch.stack([k, v]), state.ring_group, dim=3)
        k_idx = torch.arange(n * span, device=q.device)
        if low_memory:
            layout = KeyLayout(q_idx, k_idx, segments, key_valid, causal, sliding_window)
            return low_memory_attention(q, kv[0], kv[1], layout, scale=scale, softcap=softcap)[0].to(q.dtype)
        mask = allow_own_key_in_empty_rows(allowed_mask(q_idx, k_idx, segments, key_valid, **opts), q_idx, k_idx)
        return dense_attention(q, kv[0], kv[1], mask, scale=scale, softcap=softcap, dropout=dropout)

    # Key and value travel as one tensor: one send/recv per step, and one fixed backward order.
    kv = torch.stack([k, v])
    out = lse = None
    for step in range(n):
        src = (me - step) % n  # the ring rank this block started on
        k_idx = torch.arange(src * span, (src + 1) * span, device=q.device)
        mask = allowed_mask(q_idx, k_idx, segments, key_valid, **opts)
        if bool(mask.any()):
            if low_memory:
                layout = KeyLayout(q_idx, k_idx, segments, key_valid, causal, sliding_window)
                out_b, lse_b = low_memory_attention(q, kv[0], kv[1], layout, scale=scale, softcap=softcap)
            else:
                out_b, lse_b = block_attention(q, kv[0], kv[1], mask, scale=scale, softcap=softcap, dropout=dropout)
            out, lse = (out_b, lse_b) if out is None else merge_blocks(out, lse, out_b, lse_b)
        elif step == n - 1:
            # A block nobody reads would leave its ring_shift without a backward on this rank while its
            # neighbour runs one: a zero-weight use keeps the backward collectives matched.
            out = out + 0.0 * kv.sum() if out is not None else None
        if step < n - 1:
            kv = ring_shift(kv, state.ring_ranks, me)
    if out is None:
        # Every key is hidden from every local query (an all-padding span): output zeros, keep the graph.
        return q * 0.0 + 0.0 * kv.sum()
    return out.to(q.dtype)
