"""DeepSeek-V4's RMSNorms, computed as transformers computes them (float32 statistics)."""

from __future__ import annotations

from typing import Any

import torch
from megatron.core.transformer.module import MegatronModule

__all__ = ["RMSNorm", "unweighted_rms_norm"]


class RMSNorm(MegatronModule):
    """``weight * x / rms(x)``, the statistics in float32 (HF ``DeepseekV4RMSNorm``).

    Args:
        config: the TransformerConfig.
        hidden_size: normalised width.
        eps: added to the mean square.
    """

    def __init__(self, config: Any, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__(config=config)
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(hidden_size, dtype=config.params_dtype))
        # megatron all-reduces the grads of sequence-parallel norm weights across TP ranks.
        self.weight.sequence_parallel = config.sequence_parallel

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise the last dimension of ``x``."""
        dtype = x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


def unweighted_rms_norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    """``x / rms(x)`` over the last dimension, no weight (HF ``DeepseekV4UnweightedRMSNorm``)."""
    return x * torch.rsqrt(x.float().square().mean(-1, keepdim=True) + eps).to(x.dtype)
