"""Gemma 4's MoE block (beside the dense MLP) as megatron-core modules.

transformers 5.19 (``Gemma4TextRouter``, ``Gemma4TextExperts``): the router reads the layer's
residual stream, not the MLP input: ``proj(rms(x) * scale * hidden^-0.5)`` (a weightless RMSNorm),
softmax over all experts in float32, top-k, renormalised, then each kept weight multiplied by a
learned ``per_expert_scale``. Each expert is a gated MLP with the model's activation; experts are
stored fused (``gate_up_proj`` ``[E, 2I, H]``, ``down_proj`` ``[E, H, I]``), and so they are here
(megatron-core's MoE layer routes differently and has no such router).

Tensor parallelism splits every expert's intermediate size (``gate_up`` by gate and up halves,
``down`` by columns) and all-reduces the expert output; the router is replicated.
"""

from __future__ import annotations

from typing import Any

import torch
from megatron.core.tensor_parallel import reduce_from_tensor_model_parallel_region
from megatron.core.transformer.module import MegatronModule
from megatron.core.utils import divide, get_tensor_model_parallel_group_if_none

from swiftcore_bridge_gemma4.norm import Gemma4RMSNorm

__all__ = ["Gemma4Experts", "Gemma4MoE", "Gemma4Router"]


class Gemma4Router(MegatronModule):
    """Top-k softmax router with input scale and per-expert output scale.

    Weights: ``weight`` ``[E, H]`` (HF ``router.proj.weight``), ``scale`` ``[H]``, ``per_expert_scale`` ``[E]``.
    """

    def __init__(self, config: Any, num_experts: int, top_k: int) -> None:
        super().__init__(config=config)
        self.top_k = top_k
        self.norm = Gemma4RMSNorm(config, config.hidden_size, eps=config.layernorm_epsilon, with_scale=False)
        self.weight = torch.nn.Parameter(torch.empty(num_experts, config.hidden_size, dtype=config.params_dtype))
        config.init_method(self.weight)
        self.scale = torch.nn.Parameter(torch.ones(config.hidden_size, dtype=config.params_dtype))
        self.per_expert_scale = torch.nn.Parameter(torch.ones(num_experts, dtype=config.params_dtype))

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``tokens`` ``[T, H]`` -> (weights ``[T, k]``, expert indices ``[T, k]``)."""
        x = self.norm(tokens) * self.scale * tokens.shape[-1] ** -0.5
        probs = torch.softmax(torch.nn.functional.linear(x, self.weight), dim=-1, dtype=torch.float32)
        weights, index = torch.topk(probs, k=self.top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights * self.per_expert_scale[index], index


class Gemma4Experts(MegatronModule):
    """All experts' gated MLPs in two fused tensors (this rank's slice of their intermediate size).

    Weights: ``gate_up_weight`` ``[E, 2I/tp, H]`` (``[gate; up]``), ``down_weight`` ``[E, H, I/tp]``.
    """

    def __init__(self, config: Any, num_experts: int, ffn_hidden_size: int, tp_group: Any = None) -> None:
        super().__init__(config=config)
        self.tp_group = get_tensor_model_parallel_group_if_none(tp_group)
        tp = self.tp_group.size() if self.tp_group is not None else 1
        local = divide(ffn_hidden_size, tp)
        self.num_experts = num_experts
        self.activation = config.activation_func
        self.gate_up_weight = torch.nn.Parameter(
            torch.empty(num_experts, 2 * local, config.hidden_size, dtype=config.params_dtype))
        self.down_weight = torch.nn.Parameter(torch.empty(num_experts, config.hidden_size, local,
                                                          dtype=config.params_dtype))
        config.init_method(self.gate_up_weight)
        config.output_layer_init_method(self.down_weight)

    def forward(self, tokens: torch.Tensor, index: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """Sum of the chosen experts' outputs, each times its routing weight; ``[T, H]``.

        Experts are visited in index order and their outputs added with ``index_add_``, as HF does.
        """
        out = torch.zeros_like(tokens)
        for e in range(self.num_experts):
            token_idx, slot = torch.where(index == e)
            if token_idx.numel() == 0:
                continue
            gate, up = torch.nn.functional.linear(tokens[token_idx], self.gate_up_weight[e]).chunk(2, dim=-1)
            hidden = torch.nn.functional.linear(self.activation(gate) * up, self.down_weight[e])
            out.index_add_(0, token_idx, (hidden * weights[token_idx, slot, None]).to(out.dtype))
        if self.tp_group is not None and self.tp_group.size() > 1:
            out = reduce_from_tensor_model_parallel_region(out, group=self.tp_group)
        return out


class Gemma4MoE(MegatronModule):
    """Router + experts; the decoder layer applies the norms around them (:mod:`~swiftcore_bridge_gemma4.layer`)."""

    def __init__(self, config: Any, num_experts: int, top_k: int, ffn_hidden_size: int, tp_group: Any = None) -> None:
        super().__init__(config=config)
        self.router = Gemma4Router(config, num_experts, top_k)
        self.experts = Gemma4Experts(config, num_experts, ffn_hidden_size, tp_group)

    def forward(self, residual: torch.Tensor, expert_input: torch.Tensor) -> torch.Tensor:
        """Route on ``residual`` and run the experts on ``expert_input`` (both ``[..., H]``)."""
        shape = residual.shape
        weights, index = self.router(residual.reshape(-1, shape[-1]))
        return self.experts(expert_input.reshape(-1, shape[-1]), index, weights).reshape(shape)
