"""DeepSeek-V4's rotary embedding: interleaved pairs, on the trailing ``qk_rope_head_dim`` channels of a head.

megatron-core's ``RotaryEmbedding`` rotates the leading channels and takes one base per model; V4
rotates the trailing slice, with two bases (sliding-window layers vs. layers with a compressor), and
rotates compressed entries at their window's position and the attention output back by the query's.
"""

from __future__ import annotations

import torch

__all__ = ["apply_rotary", "cos_sin", "inverse_frequencies"]


def inverse_frequencies(base: float, dim: int) -> torch.Tensor:
    """One frequency per rotated pair: ``1 / base^(2i/dim)`` (float32)."""
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))


def cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos``/``sin`` of ``positions [b, n]`` times each frequency: ``[b, n, dim/2]`` each."""
    freqs = positions[..., None].float() * inv_freq.to(device=positions.device, dtype=torch.float)
    return freqs.cos().to(dtype), freqs.sin().to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1 = x[..., 0::2]
    x2 = x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int = 1) -> torch.Tensor:
    """Rotate the trailing ``2 * cos.shape[-1]`` channels of ``x`` pairwise; leave the leading ones.

    Args:
        x: ``[b, heads, n, d]`` (``unsqueeze_dim=1``) or ``[b, n, heads, d]`` (``unsqueeze_dim=2``).
        cos: ``[b, n, rope/2]`` from :func:`cos_sin`.
        sin: likewise (negate it to rotate back).
        unsqueeze_dim: where the head axis of ``x`` is.
    """
    cos = cos.repeat_interleave(2, dim=-1).unsqueeze(unsqueeze_dim)
    sin = sin.repeat_interleave(2, dim=-1).unsqueeze(unsqueeze_dim)
    rope_dim = cos.shape[-1]
    nope, rope = x[..., :-rope_dim], x[..., -rope_dim:]
    rotated = ((rope.float() * cos) + (_rotate_half(rope).float() * sin)).to(x.dtype)
    return torch.cat([nope, rotated], dim=-1)
