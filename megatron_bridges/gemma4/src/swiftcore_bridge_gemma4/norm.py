"""Gemma 4's RMSNorm as a module megatron-core's specs can build.

transformers 5.19's ``Gemma4RMSNorm`` is a plain RMSNorm (``weight * x / rms(x)``, weights start at
1; unlike Gemma 2/3 and Qwen3.5 there is no ``1 + weight``), computed in float32 with
``torch.pow(mean_square + eps, -0.5)``. The value norm has no weight at all (``with_scale=False``).
megatron-core's torch RMSNorm computes the same function with ``rsqrt``; this module repeats HF's
formula operation for operation, so the two models see the same rounding.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["Gemma4RMSNorm"]


class Gemma4RMSNorm(torch.nn.Module):
    """``weight * x * (mean(x^2) + eps)^-0.5`` over the last dimension, in float32.

    Args:
        config: the megatron TransformerConfig (parameter dtype, ``sequence_parallel``).
        hidden_size: the normalised size.
        eps: added to the mean square.
        with_scale: False for the weightless value norm.
    """

    def __init__(self, config: Any, hidden_size: int, eps: float = 1e-6, with_scale: bool = True) -> None:
        super().__init__()
        self.eps = eps
        if with_scale:
            self.weight = torch.nn.Parameter(torch.ones(hidden_size, dtype=config.params_dtype))
            # megatron all-reduces the grads of sequence-parallel norm weights across TP ranks.
            self.weight.sequence_parallel = config.sequence_parallel
        else:
            self.weight = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise the last dimension of ``x``; the result has ``x``'s dtype."""
        xf = x.float()
        normed = xf * torch.pow(xf.pow(2).mean(-1, keepdim=True) + self.eps, -0.5)
        if self.weight is not None:
            normed = normed * self.weight.float()
        return normed.type_as(x)
