"""Ulysses: trade the sequence shard for a head shard with one all-to-all, and back after attention.

On entry every rank of the Ulysses group holds all ``H`` heads of its ``S/N`` tokens; after the
all-to-all it holds ``H/N`` heads of all ``S`` tokens (of the group's span), so attention runs unchanged.
Query, key and value heads travel in one packed all-to-all (one collective per direction, whatever the
grouped-query layout), which also fixes the order of the backward collectives on every rank.
"""

from __future__ import annotations

from typing import Any

from swiftcore_sequence_parallel.comm import all_to_all

__all__ = ["check_heads", "heads_to_sequence", "sequence_to_heads"]


def check_heads(num_heads: int, ulysses_size: int) -> None:
    """ValueError unless the Ulysses size divides the query head count."""
    if ulysses_size > 1 and num_heads % ulysses_size:
        raise ValueError(
            f"Ulysses sequence parallel over {ulysses_size} ranks needs a head count divisible by "
            f"{ulysses_size}, but the model has {num_heads} attention heads: choose an SP size that divides "
            f"{num_heads}, or use mode='ring' (any size), or mode='hybrid' with ulysses_size dividing "
            f"{num_heads}"
        )


def heads_to_sequence(q: Any, k: Any, v: Any, group: Any, size: int) -> tuple[Any, Any, Any]:
    """``[B, H, s, D]`` shards of the sequence -> ``[B, H/size, size*s, D]`` shards of the heads.

    Key/value heads that ``size`` does not divide (fewer kv heads than ranks, say) are first repeated to
    the query head count; grouped-query order is kept (query head ``h`` still meets its kv head).
    """
    import torch

    from swiftcore_sequence_parallel.kernels import expand_kv

    b, h, s, d = q.shape
    check_heads(h, size)
    if k.shape[1] % size:
        k, v = expand_kv(k, h), expand_kv(v, h)
    hkv = k.shape[1]
    # Rank j's part (dim 1 index j) holds query heads group j and the kv heads that group uses.
    packed = torch.cat(
        [
            q.reshape(b, size, h // size, s, d),
            k.reshape(b, size, hkv // size, s, d),
            v.reshape(b, size, hkv // size, s, d),
        ],
        dim=2,
    ).reshape(b, h + 2 * hkv, s, d)
    full = all_to_all(packed, group, scatter_dim=1, gather_dim=2)
    qh, kh = h // size, hkv // size
    return full[:, :qh], full[:, qh : qh + kh], full[:, qh + kh :]


def sequence_to_heads(out: Any, group: Any) -> Any:
    """Inverse of :func:`heads_to_sequence` for the attention output: ``[B, H/size, size*s, D]`` -> ``[B, H, s, D]``."""
    return all_to_all(out, group, scatter_dim=2, gather_dim=1)
