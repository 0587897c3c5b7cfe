"""Local attention math on tensors a rank holds in full: plain (sdpa) and blockwise with log-sum-exp."""

from __future__ import annotations

from typing import Any

__all__ = ["block_attention", "dense_attention", "expand_kv", "merge_blocks"]


def expand_kv(x: Any, num_heads: int) -> Any:
    """Repeat key/value heads to ``num_heads`` (grouped-query attention), like transformers' ``repeat_kv``."""
    if x.shape[1] == num_heads:
        return x
    return x.repeat_interleave(num_heads // x.shape[1], dim=1)


def _scores(q: Any, k: Any, scale: float, softcap: float | None) -> Any:
    import torch

    # float32 scores whatever the input dtype: the log-sum-exp of a bf16 row loses the precision the
    # online softmax relies on.
    s = torch.matmul(q.float(), expand_kv(k, q.shape[1]).float().transpose(-1, -2)) * scale
    if softcap is not None:
        s = torch.tanh(s / softcap) * softcap
    return s


def dense_attention(
    q: Any,
    k: Any,
    v: Any,
    mask: Any,
    *,
    scale: float,
    softcap: float | None = None,
    dropout: float = 0.0,
) -> Any:
    """Attention of ``q [B, H, Sq, D]`` over ``k, v [B, Hkv, Sk, D]`` under boolean ``mask``.

    torch's sdpa when it can (no soft-capping), else the eager formula; every row must allow a key.
    """
    import torch
    import torch.nn.functional as F

    if softcap is None:
        return F.scaled_dot_product_attention(
            q, expand_kv(k, q.shape[1]), expand_kv(v, q.shape[1]), attn_mask=mask, dropout_p=dropout, scale=scale
        )
    s = _scores(q, k, scale, softcap).masked_fill(~mask, torch.finfo(torch.float32).min)
    p = F.dropout(torch.softmax(s, dim=-1), p=dropout)
    return torch.matmul(p, expand_kv(v, q.shape[1]).float()).to(q.dtype)


def block_attention(
    q: Any,
    k: Any,
    v: Any,
    mask: Any,
    *,
    scale: float,
    softcap: float | None = None,
    dropout: float = 0.0,
) -> tuple[Any, Any]:
    """Attention of ``q`` over one key/value block: float32 ``(output [B, H, Sq, D], lse [B, H, Sq])``.

    Masked scores are the most negative float32, not ``-inf``: a row the block hides completely then has
    a finite log-sum-exp, its weight in :func:`merge_blocks` is exactly 0, and no NaN reaches autograd.
    """
    import torch
    import torch.nn.functional as F

    s = _scores(q, k, scale, softcap).masked_fill(~mask, torch.finfo(torch.float32).min)
    lse = torch.logsumexp(s, dim=-1)
    p = F.dropout(torch.exp(s - lse.unsqueeze(-1)), p=dropout)
    return torch.matmul(p, expand_kv(v, q.shape[1]).float()), lse


def merge_blocks(out: Any, lse: Any, out_b: Any, lse_b: Any) -> tuple[Any, Any]:
    """Online softmax: combine two partial attentions over disjoint key sets by their log-sum-exps."""
    import torch

    new = torch.logaddexp(lse, lse_b)
    merged = out * torch.exp(lse - new).unsqueeze(-1) + out_b * torch.exp(lse_b - new).unsqueeze(-1)
    return merged, new
