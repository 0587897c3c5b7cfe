"""Local attention math on tensors a rank holds in full: plain (sdpa), blockwise with log-sum-exp, and the
low-memory kernel the SP attention uses (scores rebuilt in the backward)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["KeyLayout", "block_attention", "dense_attention", "expand_kv", "low_memory_attention", "merge_blocks"]


def expand_kv(x: Any, num_heads: int) -> Any:
    """Repeat key/value heads to ``num_heads`` (grouped-query attention), like transformers' ``repeat_kv``."""
    if x.shape[1] == num_heads:
        return x
    return x.repeat_interleave(num_heads // x.shape[1], dim=1)


def _scores(q: Any, k: Any, scale: float, softcap: float | None) -> Any:
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
    import torch.nn.functional as F

    s = _scores(q, k, scale, softcap).masked_fill(~mask, torch.finfo(torch.float32).min)
    lse = torch.logsumexp(s, dim=-1)
    p = F.dropout(torch.exp(s - lse.unsqueeze(-1)), p=dropout)
    return torch.matmul(p, expand_kv(v, q.shape[1]).float()), lse


def merge_blocks(out: Any, lse: Any, out_b: Any, lse_b: Any) -> tuple[Any, Any]:
    """Online softmax: combine two partial attentions over disjoint key sets by their log-sum-exps."""
    new = torch.logaddexp(lse, lse_b)
    merged = out * torch.exp(lse - new).unsqueeze(-1) + out_b * torch.exp(lse_b - new).unsqueeze(-1)
    return merged, new


@dataclass(frozen=True)
class KeyLayout:
    """Which keys the queries may see, in global coordinates.

    What :func:`~swiftcore_sequence_parallel.masks.allowed_mask` takes, kept so that the mask of any key block
    can be rebuilt (in the forward and again in the backward).
    """

    q_idx: Any
    k_idx: Any
    segments: Any
    key_valid: Any
    causal: bool
    sliding_window: int | None

    def mask(self, start: int, end: int) -> Any:
        """Boolean ``[B, 1, Sq, end - start]`` mask of the keys ``k_idx[start:end]``."""
        from swiftcore_sequence_parallel.masks import allowed_mask

        return allowed_mask(
            self.q_idx,
            self.k_idx[start:end],
            self.segments,
            self.key_valid,
            causal=self.causal,
            sliding_window=self.sliding_window,
        )


def _block_scores(q: Any, k: Any, mask: Any, scale: float, softcap: float | None) -> tuple[Any, Any]:
    """Masked float32 scores of one key block, and ``tanh`` of the capped raw scores (None without a cap)."""
    raw = torch.matmul(q, k.transpose(-1, -2)) * scale
    capped = torch.tanh(raw / softcap) if softcap is not None else None
    scores = capped * softcap if capped is not None else raw
    return scores.masked_fill(~mask, torch.finfo(torch.float32).min), capped


class _LowMemoryAttention(torch.autograd.Function):
    """Attention that keeps only ``q, k, v``, the output and the log-sum-exp for the backward (flash-attention's
    recipe in torch ops): scores and masks are rebuilt key block by key block in both passes, so a rank's
    activation memory stays linear in the sequence. torch's CPU sdpa, given a mask, saves it as a float32
    ``S x S`` tensor per layer; flash-attention's kernels, which avoid that, need a GPU."""

    @staticmethod
    def forward(ctx: Any, q: Any, k: Any, v: Any, layout: KeyLayout, scale: float, softcap: Any, block: int) -> Any:
        heads = q.shape[1]
        qf = q.float()
        kf, vf = expand_kv(k, heads).float(), expand_kv(v, heads).float()
        rows = (*q.shape[:3],)
        peak = torch.full(rows, float("-inf"), dtype=torch.float32, device=q.device)
        total = torch.zeros(rows, dtype=torch.float32, device=q.device)
        acc = torch.zeros(*rows, v.shape[-1], dtype=torch.float32, device=q.device)
        for start in range(0, k.shape[2], block):
            end = min(start + block, k.shape[2])
            mask = layout.mask(start, end)
            if not bool(mask.any()) and start > 0:
                continue  # hidden from every query (causal, other samples): adds exactly nothing
            scores, _ = _block_scores(qf, kf[:, :, start:end], mask, scale, softcap)
            new_peak = torch.maximum(peak, scores.amax(dim=-1))
            decay = torch.exp(peak - new_peak)
            p = torch.exp(scores - new_peak.unsqueeze(-1))
            total = total * decay + p.sum(dim=-1)
            acc = acc * decay.unsqueeze(-1) + torch.matmul(p, vf[:, :, start:end])
            peak = new_peak
        out = acc / total.unsqueeze(-1)
        lse = peak + torch.log(total)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.layout, ctx.scale, ctx.softcap, ctx.block = layout, scale, softcap, block
        return out, lse

    @staticmethod
    def backward(ctx: Any, d_out: Any, d_lse: Any) -> tuple[Any, ...]:
        q, k, v, out, lse = ctx.saved_tensors
        heads, kv_heads = q.shape[1], k.shape[1]
        qf = q.float()
        kf, vf = expand_kv(k, heads).float(), expand_kv(v, heads).float()
        d_out = torch.zeros_like(out) if d_out is None else d_out.float()
        # d(lse)/d(score) is the softmax itself: it adds to the usual softmax gradient row by row.
        row_term = (d_out * out).sum(dim=-1) - (0.0 if d_lse is None else d_lse.float())
        dq = torch.zeros_like(qf)
        dk, dv = torch.zeros_like(kf), torch.zeros_like(vf)
        for start in range(0, k.shape[2], ctx.block):
            end = min(start + ctx.block, k.shape[2])
            mask = ctx.layout.mask(start, end)
            if not bool(mask.any()) and start > 0:
                continue  # skipped in the forward too
            scores, capped = _block_scores(qf, kf[:, :, start:end], mask, ctx.scale, ctx.softcap)
            p = torch.exp(scores - lse.unsqueeze(-1))
            dv[:, :, start:end] = torch.matmul(p.transpose(-1, -2), d_out)
            ds = p * (torch.matmul(d_out, vf[:, :, start:end].transpose(-1, -2)) - row_term.unsqueeze(-1))
            if capped is not None:
                ds = ds * (1 - capped.square())
            ds = ds.masked_fill(~mask, 0.0) * ctx.scale  # masked scores are constants
            dq += torch.matmul(ds, kf[:, :, start:end])
            dk[:, :, start:end] = torch.matmul(ds.transpose(-1, -2), qf)

        def fold(grad: Any, like: Any) -> Any:  # repeated key/value heads: sum each group's gradient
            b, _, s, d = grad.shape
            return grad.reshape(b, kv_heads, heads // kv_heads, s, d).sum(dim=2).to(like.dtype)

        return dq.to(q.dtype), fold(dk, k), fold(dv, v), None, None, None, None


def low_memory_attention(
    q: Any, k: Any, v: Any, layout: KeyLayout, *, scale: float, softcap: float | None = None, block: int = 512
) -> tuple[Any, Any]:
    """Attention of ``q [B, H, Sq, D]`` over ``k, v [B, Hkv, Sk, D]`` where ``layout`` allows: float32
    ``(output [B, H, Sq, D], lse [B, H, Sq])``, both differentiable (the ring merges blocks by their lse).

    Memory: ``q, k, v``, the output and the lse are kept for the backward; the ``Sq x block`` scores of one key
    block at a time exist only while they are used. A query row that may see no key gets the mean of the
    values (finite; such rows are padding and reach no label).
    """
    return _LowMemoryAttention.apply(q, k, v, layout, scale, softcap, block)
