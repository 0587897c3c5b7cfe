"""The megatron-core decoder block spec of DeepSeek-V4, from local (non-Transformer-Engine) modules."""

from __future__ import annotations

import copy
from typing import Any

from megatron.core.models.gpt.moe_module_specs import get_moe_module_spec
from megatron.core.transformer.spec_utils import ModuleSpec
from megatron.core.transformer.transformer_block import TransformerBlockSubmodules
from megatron.core.transformer.transformer_layer import TransformerLayerSubmodules

from swiftcore_bridge_deepseek_v4.attention import DeepseekV4Attention
from swiftcore_bridge_deepseek_v4.hyper import HyperHeadNorm
from swiftcore_bridge_deepseek_v4.layer import DeepseekV4TransformerLayer
from swiftcore_bridge_deepseek_v4.moe import DeepseekV4HashRouter, DeepseekV4Router
from swiftcore_bridge_deepseek_v4.norms import RMSNorm

__all__ = ["deepseek_v4_block_spec"]


def deepseek_v4_block_spec(config: Any) -> TransformerBlockSubmodules:
    """Per layer: V4 attention of the layer's type, then megatron's MoE with the layer's router.

    Args:
        config: a :class:`~swiftcore_bridge_deepseek_v4.config.DeepseekV4TransformerConfig` (its
            ``attention_layer_types`` and ``mlp_layer_types`` give each layer's kind).

    The experts (megatron's local ``SequentialMLP``) and the shared expert (``SharedExpertMLP``) are
    megatron's own; their SwiGLU clamps at ``activation_func_clamp_value`` (HF ``swiglu_limit``).
    The final "layer norm" collapses the hyper-connection streams before the RMSNorm.
    """
    moe = get_moe_module_spec(use_te=False, num_experts=config.num_moe_experts, moe_grouped_gemm=False)
    specs = []
    for attention_type, mlp_type in zip(config.attention_layer_types, config.mlp_layer_types, strict=True):
        mlp = copy.deepcopy(moe)
        mlp.submodules.router = DeepseekV4HashRouter if mlp_type == "hash_moe" else DeepseekV4Router
        specs.append(ModuleSpec(
            module=DeepseekV4TransformerLayer,
            submodules=TransformerLayerSubmodules(
                input_layernorm=RMSNorm,
                self_attention=ModuleSpec(module=DeepseekV4Attention, params={"attention_type": attention_type}),
                pre_mlp_layernorm=RMSNorm,
                mlp=mlp,
            ),
        ))
    return TransformerBlockSubmodules(layer_specs=specs, layer_norm=HyperHeadNorm)
