"""The OLMoE bridge: swiftcore-bridge-gpt's MoE bridge, with OLMoE's q/k norms and expert width.

OLMoE differs from the Qwen3-MoE layout :class:`~swiftcore_bridge_gpt.gpt.GPTMoEBridge` maps in three ways:

- its ``q_norm`` / ``k_norm`` normalise the whole projected q / k (``heads * head_dim`` wide, one RMS over
  all heads), not each head: the layer spec swaps in :mod:`~swiftcore_bridge_olmoe.norm`'s modules, and
  their weights are split over TP ranks with the heads (column-sharded) instead of replicated;
- its experts are ``intermediate_size`` wide (it has no ``moe_intermediate_size`` and no dense MLP);
- ``norm_topk_prob`` defaults to False (softmax over all experts, then top-k: megatron's pre-softmax).

Everything else (QKV interleave, per-expert ``gate_proj``/``up_proj``/``down_proj`` as saved, router,
expert parallelism) is the GPT MoE bridge's.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from swiftcore_bridge_gpt import GPTMoEBridge
from swiftcore_megatron import COLUMN, BridgeError, Rule

__all__ = ["OlmoeBridge"]


class OlmoeBridge(GPTMoEBridge):
    """OLMoE decoder: GQA attention with whole-width q/k RMSNorm, every layer a softmax top-k MoE.

    Raises (from the methods building the model):
        BridgeError: for ``clip_qkv`` (OLMoE-0924 has none; megatron's attention cannot clamp q/k/v),
            biased linears, activations other than SiLU, rope scaling.
    """

    model_types = ("olmoe",)
    #: Trains at --tp > 1 (with sequence parallelism, megatron's rule for MoE): losses equal the transformers
    #: engine's (plugins/train_megatron/tests/test_engine_outcomes.py).
    sequence_parallel_norms = True

    def select_config(self, hf_config: dict[str, Any]) -> dict[str, Any]:
        """config.json, with the expert width under the name the MoE bridge reads (``moe_intermediate_size``)."""
        config = dict(hf_config)
        if "intermediate_size" in config:
            config.setdefault("moe_intermediate_size", config["intermediate_size"])
        return config

    @property
    def qk_norm(self) -> bool:
        """OLMoE always has q/k norms."""
        return True

    @property
    def head_dim(self) -> int:
        """``hidden_size / heads``: OLMoE's q/k norm widths are derived from it, so config.json must agree."""
        derived = int(self.get("hidden_size")) // self.num_heads
        if int(self.get("head_dim", default=derived)) != derived:
            raise BridgeError(
                f"config.json: head_dim={self.get('head_dim')} differs from hidden_size / num_attention_heads "
                f"= {derived}; transformers' OLMoE sizes q_norm / k_norm by the latter"
            )
        return derived

    def _check_supported(self) -> None:
        super()._check_supported()
        if self.get("clip_qkv", default=None) is not None:
            raise BridgeError(
                f"config.json: clip_qkv={self.get('clip_qkv')} is not supported by the olmoe bridge "
                "(megatron-core's attention does not clamp q/k/v); convert a model with clip_qkv null"
            )

    def layer_spec(self, config: Any) -> Any:
        """The GPT MoE decoder block spec with OLMoE's whole-width q/k norms in every layer."""
        from swiftcore_bridge_olmoe.norm import OlmoeKNorm, OlmoeQNorm

        spec = super().layer_spec(config)
        for layer in spec.layer_specs:
            attention = layer.submodules.self_attention.submodules
            attention.q_layernorm, attention.k_layernorm = OlmoeQNorm, OlmoeKNorm
        return spec

    def attention_rules(self, i: int) -> list[Rule]:
        """The GPT attention rules, with the q/k norm weights split over TP ranks like their heads."""
        return [
            dataclasses.replace(rule, shard=COLUMN) if rule.mcore.endswith(("q_layernorm.weight", "k_layernorm.weight"))
            else rule
            for rule in super().attention_rules(i)
        ]
