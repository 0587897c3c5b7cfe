"""Manifold-constrained hyper-connections (mHC) as megatron-core modules.

DeepSeek-V4 widens the residual stream to ``hc_mult`` copies. Around each attention and MLP block a
:class:`HyperConnection` computes, per token and from all copies, three sets of weights: ``pre``
collapses the copies into the block's input, ``post`` spreads the block's output back over them, and
``comb`` (made doubly stochastic by Sinkhorn-Knopp iterations) mixes the copies into each other:
``streams = post * block(collapse(streams)) + comb^T @ streams``. Before the final norm
:class:`HyperHeadNorm` collapses the copies once more.

Inside megatron's decoder the copies travel as one ``[s, b, hc_mult * hidden]`` tensor (megatron
hands layers 3-d hidden states); each module views them as ``[s, b, hc_mult, hidden]``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from megatron.core.transformer.module import MegatronModule

from swiftcore_bridge_deepseek_v4.norms import RMSNorm, unweighted_rms_norm

__all__ = ["HyperConnection", "HyperHead", "HyperHeadNorm"]


class HyperConnection(MegatronModule):
    """The pre/post/comb weights of one block's hyper-connection (HF ``DeepseekV4HyperConnection``).

    Parameters (HF names): ``fn`` ``[(2 + n) * n, n * hidden]``, ``base`` ``[(2 + n) * n]``,
    ``scale`` ``[3]`` for ``n = hc_mult`` streams.
    """

    def __init__(self, config: Any) -> None:
        super().__init__(config=config)
        n = self.hc = config.hc_mult
        self.iters, self.hc_eps, self.norm_eps = config.hc_sinkhorn_iters, config.hc_eps, config.layernorm_epsilon
        self.fn = torch.nn.Parameter(torch.empty((2 + n) * n, n * config.hidden_size, dtype=config.params_dtype))
        self.base = torch.nn.Parameter(torch.zeros((2 + n) * n, dtype=config.params_dtype))
        self.scale = torch.nn.Parameter(torch.ones(3, dtype=config.params_dtype))
        config.init_method(self.fn)

    def forward(self, streams: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``streams [..., n, hidden]`` -> ``post [..., n]``, ``comb [..., n, n]``, block input ``[..., hidden]``."""
        n = self.hc
        flat = unweighted_rms_norm(streams.flatten(-2).float(), self.norm_eps)
        mixed = F.linear(flat, self.fn.float())
        pre_w, post_w, comb_w = mixed.split([n, n, n * n], dim=-1)
        pre_b, post_b, comb_b = self.base.split([n, n, n * n])
        pre_s, post_s, comb_s = self.scale.unbind(0)
        pre = torch.sigmoid(pre_w * pre_s + pre_b) + self.hc_eps
        post = 2 * torch.sigmoid(post_w * post_s + post_b)
        comb = torch.softmax(comb_w.view(*comb_w.shape[:-1], n, n) * comb_s + comb_b.view(n, n), dim=-1) + self.hc_eps
        # Sinkhorn-Knopp: alternate column and row normalisation towards a doubly stochastic matrix.
        comb = comb / (comb.sum(dim=-2, keepdim=True) + self.hc_eps)
        for _ in range(self.iters - 1):
            comb = comb / (comb.sum(dim=-1, keepdim=True) + self.hc_eps)
            comb = comb / (comb.sum(dim=-2, keepdim=True) + self.hc_eps)
        collapsed = (pre.unsqueeze(-1) * streams).sum(dim=-2).to(streams.dtype)
        return post, comb, collapsed

    @staticmethod
    def merge(streams: torch.Tensor, block_output: torch.Tensor, post: torch.Tensor,
              comb: torch.Tensor) -> torch.Tensor:
        """``post * output`` spread over the streams, plus the streams mixed by ``comb`` (transposed)."""
        dtype = streams.dtype
        return post.to(dtype).unsqueeze(-1) * block_output.unsqueeze(-2) + torch.matmul(
            comb.to(dtype).transpose(-1, -2), streams)


class HyperHead(MegatronModule):
    """The final collapse of the streams (HF ``DeepseekV4HyperHead``: ``hc_fn``, ``hc_base``, ``hc_scale``)."""

    def __init__(self, config: Any) -> None:
        super().__init__(config=config)
        n = self.hc = config.hc_mult
        self.hc_eps, self.norm_eps = config.hc_eps, config.layernorm_epsilon
        self.fn = torch.nn.Parameter(torch.empty(n, n * config.hidden_size, dtype=config.params_dtype))
        self.base = torch.nn.Parameter(torch.zeros(n, dtype=config.params_dtype))
        self.scale = torch.nn.Parameter(torch.ones(1, dtype=config.params_dtype))
        config.init_method(self.fn)

    def forward(self, streams: torch.Tensor) -> torch.Tensor:
        """``[..., n, hidden]`` -> ``[..., hidden]``."""
        flat = unweighted_rms_norm(streams.flatten(-2).float(), self.norm_eps)
        mixes = F.linear(flat, self.fn.float())
        pre = torch.sigmoid(mixes * self.scale.float() + self.base.float()) + self.hc_eps
        return (pre.unsqueeze(-1) * streams).sum(dim=-2).to(streams.dtype)


class HyperHeadNorm(MegatronModule):
    """The decoder's final "layer norm": collapse the streams (:class:`HyperHead`), then RMSNorm.

    Built by megatron's ``TransformerBlock`` as its ``final_layernorm`` (``config, hidden_size, eps``).
    """

    def __init__(self, config: Any, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__(config=config)
        self.hc, self.hidden = config.hc_mult, hidden_size
        self.hc_head = HyperHead(config)
        self.norm = RMSNorm(config, hidden_size, eps=eps)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """``[s, b, hc_mult * hidden]`` -> ``[s, b, hidden]``."""
        streams = hidden_states.view(*hidden_states.shape[:-1], self.hc, self.hidden)
        return self.norm(self.hc_head(streams))
