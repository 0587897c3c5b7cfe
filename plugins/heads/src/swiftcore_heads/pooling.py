"""Pooling: one vector per sample from a decoder's hidden states, for padded and packed batches alike.

A padded batch is ``[B, L, H]`` with an ``attention_mask`` (left or right padding); a packed
(padding-free) batch is ``[1, T, H]`` with ``seq_lens`` (the samples' lengths in order). Both give
``[B, H]``: the last real token of each sample (``last``) or the mean over its real tokens (``mean``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["POOLING", "pool", "last_token_indices", "position_ids_from_mask"]

POOLING = ("last", "mean")


def last_token_indices(attention_mask: Any) -> Any:
    """Index of the last real token in each row of a padded batch, for left or right padding.

    Args:
        attention_mask: ``[B, L]``, 1 on real tokens.

    Returns:
        LongTensor ``[B]``.
    """
    import torch

    positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)
    # The largest position holding a real token: correct whatever side the padding is on.
    return (positions * attention_mask.long()).argmax(dim=1)


def position_ids_from_mask(attention_mask: Any) -> Any:
    """Positions counting real tokens only, so a left-padded sample gets the positions it has alone."""
    positions = attention_mask.long().cumsum(dim=1) - 1
    return positions.clamp(min=0)


def pool(hidden: Any, method: str, *, attention_mask: Any = None, seq_lens: Any = None) -> Any:
    """Pool ``hidden`` into one vector per sample.

    Args:
        hidden: ``[B, L, H]`` (padded) or ``[1, T, H]`` (packed).
        method: ``last`` or ``mean``.
        attention_mask: ``[B, L]`` for a padded batch.
        seq_lens: ``[N]`` sample lengths for a packed batch (takes precedence over ``attention_mask``).

    Returns:
        ``[B, H]`` (padded) or ``[N, H]`` (packed).
    """
    import torch

    if method not in POOLING:
        raise ValueError(f"pooling {method!r} is not one of {', '.join(POOLING)}")
    if seq_lens is not None:
        flat = hidden.reshape(-1, hidden.shape[-1])
        lens = seq_lens.to(device=flat.device, dtype=torch.long)
        ends = lens.cumsum(0)
        if method == "last":
            return flat[ends - 1]
        # Segment mean: sum each sample's rows with index_add over a sample-id vector.
        sample_id = torch.repeat_interleave(torch.arange(len(lens), device=flat.device), lens)
        sums = torch.zeros(len(lens), flat.shape[-1], dtype=flat.dtype, device=flat.device)
        sums.index_add_(0, sample_id, flat[: int(ends[-1])])
        return sums / lens.unsqueeze(1).to(flat.dtype)
    if attention_mask is None:
        attention_mask = torch.ones(hidden.shape[:2], dtype=torch.long, device=hidden.device)
    if method == "last":
        idx = last_token_indices(attention_mask)
        return hidden[torch.arange(hidden.shape[0], device=hidden.device), idx]
    mask = attention_mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
