"""The Gemma 4 decoder layer as a megatron-core module, and the decoder block spec built from it.

transformers 5.19 ``Gemma4TextDecoderLayer.forward``, step for step::

    h = h + post_attention_layernorm(attention(input_layernorm(h)))
    m = mlp(pre_feedforward_layernorm(h))                       # dense gated MLP
    if enable_moe_block:                                        # MoE beside the dense MLP
        m = post_feedforward_layernorm_1(m)
            + post_feedforward_layernorm_2(experts(pre_feedforward_layernorm_2(h), router(h)))
    h = h + post_feedforward_layernorm(m)
    if hidden_size_per_layer_input:                             # per-layer input embeddings
        h = h + post_per_layer_input_norm(per_layer_projection(act(per_layer_input_gate(h)) * ple_i))
    h = h * layer_scalar

megatron-core's ``TransformerLayer`` has one norm before each sub-block and none after, so this
layer is its own module; its dense MLP is megatron-core's ``MLP`` with local linears, and the
attention and MoE are :mod:`~swiftcore_bridge_gemma4.attention` and :mod:`~swiftcore_bridge_gemma4.moe`.
mcore names (HF in brackets): ``input_layernorm``, ``self_attention``, ``post_attention_layernorm``,
``pre_mlp_layernorm`` [pre_feedforward_layernorm], ``mlp``, ``post_mlp_layernorm``
[post_feedforward_layernorm], ``post_dense_mlp_layernorm`` [_1], ``pre_moe_layernorm`` [pre_..._2],
``moe``, ``post_moe_layernorm`` [post_..._2], ``per_layer_input_gate``, ``per_layer_projection``,
``post_per_layer_input_norm``, ``layer_scalar``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import torch
from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear
from megatron.core.transformer.mlp import MLP, MLPSubmodules
from megatron.core.transformer.module import MegatronModule
from megatron.core.transformer.spec_utils import ModuleSpec, build_module
from megatron.core.transformer.transformer_block import TransformerBlockSubmodules
from megatron.core.transformer.transformer_layer import get_transformer_layer_offset
from megatron.core.utils import divide, get_pg_rank, get_tensor_model_parallel_group_if_none

from swiftcore_bridge_gemma4.attention import Gemma4Attention, Gemma4AttentionSubmodules, Gemma4ForwardState
from swiftcore_bridge_gemma4.facts import LayerFacts
from swiftcore_bridge_gemma4.moe import Gemma4MoE
from swiftcore_bridge_gemma4.norm import Gemma4RMSNorm

__all__ = ["Gemma4DecoderLayer", "Gemma4LayerSubmodules", "gemma4_block_spec"]


@dataclass
class Gemma4LayerSubmodules:
    """What a :class:`Gemma4DecoderLayer` builds (local, non-Transformer-Engine classes by default)."""

    norm: type = Gemma4RMSNorm
    self_attention: ModuleSpec = field(default_factory=lambda: ModuleSpec(
        module=Gemma4Attention, submodules=Gemma4AttentionSubmodules()))
    mlp: ModuleSpec = field(default_factory=lambda: ModuleSpec(
        module=MLP, submodules=MLPSubmodules(linear_fc1=ColumnParallelLinear, linear_fc2=RowParallelLinear)))
    moe: type = Gemma4MoE
    column_linear: type = ColumnParallelLinear
    row_linear: type = RowParallelLinear


class Gemma4DecoderLayer(MegatronModule):
    """One Gemma 4 decoder layer (see the module docstring for the computation and the names).

    Args:
        config: the megatron TransformerConfig.
        submodules: the classes to build.
        facts: this layer's facts (attention type, head sizes, kv sharing, MLP width, MoE).
        per_layer_input_size: HF ``hidden_size_per_layer_input`` (0: no per-layer inputs).
        num_experts: experts of the MoE block (used when ``facts.moe``).
        top_k: experts per token.
        moe_ffn_hidden_size: each expert's intermediate size.
        layer_number: 1-based index within the pipeline stage (megatron's convention).
        pg_collection: megatron's process groups (default: the global ones).
        vp_stage: virtual pipeline stage (unused; megatron passes it).
    """

    def __init__(self, config: Any, submodules: Gemma4LayerSubmodules, facts: LayerFacts, *,
                 per_layer_input_size: int = 0, num_experts: int = 0, top_k: int = 0, moe_ffn_hidden_size: int = 0,
                 layer_number: int = 1, pg_collection: Any = None, vp_stage: int | None = None) -> None:
        super().__init__(config=config)
        pp_group = getattr(pg_collection, "pp", None) if pg_collection is not None else None
        offset = get_transformer_layer_offset(config, vp_stage, get_pg_rank(pp_group) if pp_group is not None else None)
        self.layer_number = layer_number + offset
        self.facts = facts
        tp_group = get_tensor_model_parallel_group_if_none(getattr(pg_collection, "tp", None))
        self.tp_rank = tp_group.rank() if tp_group is not None else 0
        tp = tp_group.size() if tp_group is not None else 1
        h, eps = config.hidden_size, config.layernorm_epsilon

        def norm() -> Any:
            return build_module(submodules.norm, config=config, hidden_size=h, eps=eps)

        self.input_layernorm = norm()
        self.self_attention = build_module(submodules.self_attention, config=config, facts=facts, tp_group=tp_group)
        self.post_attention_layernorm = norm()
        self.pre_mlp_layernorm = norm()
        # megatron's MLP sizes linear_fc2 from config.ffn_hidden_size: give it this layer's width.
        mlp_config = copy.copy(config)
        mlp_config.ffn_hidden_size = facts.ffn_hidden_size
        self.mlp = build_module(submodules.mlp, config=mlp_config, ffn_hidden_size=facts.ffn_hidden_size,
                                tp_group=tp_group)
        self.post_mlp_layernorm = norm()
        if facts.moe:
            self.post_dense_mlp_layernorm = norm()
            self.pre_moe_layernorm = norm()
            self.moe = build_module(submodules.moe, config=config, num_experts=num_experts, top_k=top_k,
                                    ffn_hidden_size=moe_ffn_hidden_size, tp_group=tp_group)
            self.post_moe_layernorm = norm()
        self.per_layer_input_size = per_layer_input_size
        if per_layer_input_size:
            self.local_per_layer_size = divide(per_layer_input_size, tp)
            self.per_layer_input_gate = build_module(
                submodules.column_linear, h, per_layer_input_size, config=config, init_method=config.init_method,
                gather_output=False, bias=False, skip_bias_add=True, is_expert=False, tp_group=tp_group,
            )
            self.per_layer_projection = build_module(
                submodules.row_linear, per_layer_input_size, h, config=config,
                init_method=config.output_layer_init_method, bias=False, input_is_parallel=True,
                skip_bias_add=True, is_expert=False, tp_group=tp_group,
            )
            self.post_per_layer_input_norm = norm()
        # A constant of the checkpoint (HF keeps it as a buffer too): saved, not trained.
        self.register_buffer("layer_scalar", torch.ones(1, dtype=config.params_dtype))

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
                context: Gemma4ForwardState | None = None, **kwargs: Any) -> tuple[torch.Tensor, Any]:
        """Run the layer on ``[seq, batch, hidden]``; return it with the forward state, as megatron's block expects.

        Raises:
            ValueError: without the :class:`Gemma4ForwardState` the model passes as ``context``, or
                with inference caches / packed sequences (not supported by this layer).
        """
        if not isinstance(context, Gemma4ForwardState):
            raise ValueError("Gemma4DecoderLayer needs the Gemma4ForwardState that Gemma4GPTModel passes as context")
        if kwargs.get("inference_context") is not None or kwargs.get("packed_seq_params") is not None:
            raise ValueError("Gemma4DecoderLayer does not support inference caches or packed sequences yet")
        residual = hidden_states
        x = self.self_attention(self.input_layernorm(hidden_states), context, attention_mask)
        hidden_states = residual + self.post_attention_layernorm(x)

        residual = hidden_states
        x, _ = self.mlp(self.pre_mlp_layernorm(hidden_states))
        if self.facts.moe:
            experts = self.moe(residual, self.pre_moe_layernorm(residual))
            x = self.post_dense_mlp_layernorm(x) + self.post_moe_layernorm(experts)
        hidden_states = residual + self.post_mlp_layernorm(x)

        if self.per_layer_input_size:
            residual = hidden_states
            ple = context.per_layer_inputs[:, :, self.facts.index]
            lo = self.tp_rank * self.local_per_layer_size
            x, _ = self.per_layer_input_gate(hidden_states)
            x = self.config.activation_func(x) * ple[..., lo:lo + self.local_per_layer_size]
            x, _ = self.per_layer_projection(x)
            hidden_states = residual + self.post_per_layer_input_norm(x)
        return hidden_states * self.layer_scalar, context


def gemma4_block_spec(facts: list[LayerFacts], *, per_layer_input_size: int = 0, num_experts: int = 0,
                      top_k: int = 0, moe_ffn_hidden_size: int = 0) -> TransformerBlockSubmodules:
    """The decoder block spec: one :class:`Gemma4DecoderLayer` per layer, then the final Gemma RMSNorm.

    Args:
        facts: one entry per layer (:func:`~swiftcore_bridge_gemma4.facts.layer_facts`).
        per_layer_input_size: HF ``hidden_size_per_layer_input`` (0: none).
        num_experts: experts of the MoE block (0: no MoE).
        top_k: experts per token.
        moe_ffn_hidden_size: each expert's intermediate size.
    """
    submodules = Gemma4LayerSubmodules()
    specs = [
        ModuleSpec(module=Gemma4DecoderLayer, submodules=submodules, params={
            "facts": f, "per_layer_input_size": per_layer_input_size, "num_experts": num_experts, "top_k": top_k,
            "moe_ffn_hidden_size": moe_ffn_hidden_size,
        })
        for f in facts
    ]
    return TransformerBlockSubmodules(layer_specs=specs, layer_norm=Gemma4RMSNorm)
