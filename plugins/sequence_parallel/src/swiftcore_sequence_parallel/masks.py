"""Which key each query may attend to, in global sequence coordinates.

Under sequence parallelism no rank sees the whole sequence, so transformers' mask builders (which work on
the local shard) cannot be used. The attention functions rebuild the mask from the *global* position ids
and padding mask instead, with the same rules transformers applies (``transformers.masking_utils``):
causal, sliding window (``kv > q - window``), key padding, and packed samples (a new sample starts
wherever the position id does not follow on by one).
"""

from __future__ import annotations

from typing import Any

__all__ = ["allow_own_key_in_empty_rows", "allowed_mask", "segment_ids"]


def segment_ids(position_ids: Any) -> Any:
    """Sample index of every token of packed rows ``[b, S]`` (all zeros for unpacked rows)."""
    import torch

    first = position_ids[:, :1] - 1  # so that the first token never counts as a boundary
    return (torch.diff(position_ids, prepend=first, dim=-1) != 1).cumsum(-1)


def allowed_mask(
    q_idx: Any,
    k_idx: Any,
    segments: Any,
    key_valid: Any = None,
    *,
    causal: bool = True,
    sliding_window: int | None = None,
) -> Any:
    """Boolean ``[B, 1, len(q_idx), len(k_idx)]`` mask (True = attend) for the given global positions.

    Args:
        q_idx: global row indices of the queries (1-D long tensor).
        k_idx: global row indices of the keys.
        segments: :func:`segment_ids` of the global position ids, ``[b, S]`` (``b`` is 1 or ``B``).
        key_valid: global padding mask ``[B, S]`` (True = real token), or None.
        causal: decoder attention (keys after the query are hidden).
        sliding_window: keep only keys closer than this many rows (transformers' convention).
    """
    diff = q_idx[:, None] - k_idx[None, :]
    mask = segments[:, q_idx][:, :, None] == segments[:, k_idx][:, None, :]
    if causal:
        mask = mask & (diff >= 0)
        if sliding_window is not None:
            mask = mask & (diff < sliding_window)
    elif sliding_window is not None:
        mask = mask & (diff.abs() <= sliding_window)
    if key_valid is not None:
        mask = mask & key_valid[:, k_idx][:, None, :]
    return mask.unsqueeze(1)


def allow_own_key_in_empty_rows(mask: Any, q_idx: Any, k_idx: Any) -> Any:
    """Let a query that may attend to nothing (a left-padding token) attend to itself.

    Such rows would otherwise give NaN (softmax over nothing) and poison every gradient; their outputs
    are padding and never reach a label, so the choice does not change the loss.
    """
    empty = ~mask.any(dim=-1, keepdim=True)
    return mask | (empty & (q_idx[:, None] == k_idx[None, :]))
