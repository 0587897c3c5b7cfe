"""MiMo-V2-Flash bridge: HF ``mimo_v2_flash`` <-> megatron-core GPTModel (local spec + own attention).

Built on :class:`swiftcore_bridge_gpt.gpt.GPTMoEBridge`: embedding, norms, dense MLPs, per-expert
MLPs and the output head map as there. What MiMo adds:

- attention: :class:`~swiftcore_bridge_mimo_v2.attention.MimoAttention` in every layer of megatron's
  own ``TransformerLayer`` (see that module for why megatron's ``SelfAttention`` cannot be used);
  ``linear_qkv`` interleaves per query group ``[q heads; k; v]`` with v heads of ``v_head_dim``
  (:class:`GroupedQKV`), so a contiguous row split gives each TP rank whole groups; the sliding
  layers' sinks (``attention_sink_bias`` in the checkpoint) become ``softmax_offset``, split by head;
- the router is DeepSeek-V3's (transformers' ``MiMoV2FlashTopkRouter``): sigmoid scores, the
  ``e_score_correction_bias`` (megatron's ``expert_bias``) for choosing, group-limited top-k,
  renormalised and scaled by ``routed_scaling_factor``; there is no shared expert;
- ``mlp_layer_types`` says which layers are dense (the release: the first).

MTP: the released checkpoint carries multi-token-prediction layers (``model.mtp.layers.{k}.*``: a sliding-window
attention layer with sinks and a dense MLP, behind DeepSeek-V3's ``enorm`` / ``hnorm`` / ``eh_proj`` glue, closed by
``final_layernorm``; embedding and head shared with the model). transformers 5.19 does not build them (it ignores
them on load). With ``num_nextn_predict_layers`` in config.json, the first of them (the one vLLM's MiMo-V2 proposer
runs) is built as megatron-core's MTP block (:mod:`swiftcore_megatron.mtp`) and the others are carried through; the
tests compare its logits with the layer rebuilt from transformers' modules. Without the field every MTP tensor is
carried through unchanged.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from swiftcore_bridge_gpt import GPTMoEBridge
from swiftcore_megatron import COLUMN, ROW, BridgeError, Fuse, MappingError, ParallelismError, Rule

__all__ = ["GroupedQKV", "MimoV2Bridge"]


@dataclass(frozen=True)
class GroupedQKV(Fuse):
    """``q_proj, k_proj, v_proj`` <-> ``linear_qkv`` interleaved per query group, v heads ``v_head_dim`` wide.

    Attributes:
        num_heads: query heads.
        num_groups: key/value heads of the layer.
        head_dim: query/key channels per head.
        v_head_dim: value channels per head.
    """

    num_heads: int
    num_groups: int
    head_dim: int
    v_head_dim: int

    arity = 3

    def _sizes(self) -> list[int]:
        return [self.num_heads // self.num_groups * self.head_dim, self.head_dim, self.v_head_dim]

    def to_mcore(self, tensors: Sequence[Any]) -> Any:
        """``q, k, v`` -> for each group g: ``q heads of g; k_g; v_g`` stacked on dim 0."""
        import torch

        q, k, v = tensors
        g = self.num_groups
        expected = (self.num_heads * self.head_dim, g * self.head_dim, g * self.v_head_dim)
        if (q.shape[0], k.shape[0], v.shape[0]) != expected:
            got = (q.shape[0], k.shape[0], v.shape[0])
            raise MappingError(f"GroupedQKV expects q/k/v with {expected} rows (heads x head size), got {got}")
        rest = tuple(q.shape[1:])
        parts = [t.reshape(g, size, *rest) for t, size in zip((q, k, v), self._sizes(), strict=True)]
        return torch.cat(parts, dim=1).reshape(-1, *rest)

    def to_hf(self, tensor: Any) -> list[Any]:
        """Inverse of :meth:`to_mcore`."""
        import torch

        rest = tuple(tensor.shape[1:])
        grouped = tensor.reshape(self.num_groups, sum(self._sizes()), *rest)
        return [t.reshape(-1, *rest) for t in torch.split(grouped, self._sizes(), dim=1)]


class MimoV2Bridge(GPTMoEBridge):
    """MiMo-V2-Flash (``mimo_v2_flash``): hybrid sliding-window attention with sinks, sigmoid-routed MoE."""

    model_types = ("mimo_v2_flash",)
    # Released MTP tensors: not built by transformers; carried through unless the first is built (module docstring).
    passthrough_prefixes = ("model.mtp.", "mtp.")
    #: Where the release keeps the MTP layer megatron builds.
    mtp_prefix = "model.mtp.layers.0."

    @property
    def mtp_layers(self) -> int:
        """MTP layers built in megatron: 1 when config.json has ``num_nextn_predict_layers`` (the first), else 0."""
        return min(int(self.get("num_nextn_predict_layers", default=0)), 1)

    def is_passthrough(self, hf_key: str) -> bool:
        """The release's MTP tensors, but for the layer megatron builds (:attr:`mtp_layers`)."""
        if self.mtp_layers and hf_key.startswith(self.mtp_prefix):
            return False
        return super().is_passthrough(hf_key)

    def select_config(self, hf_config: dict[str, Any]) -> dict[str, Any]:
        """config.json with the defaults ``MiMoV2FlashConfig.__post_init__`` fills in when a field is absent
        (layer and MLP patterns, per-layer-type rope), so a config.json that omits them builds the same model."""
        config = dict(hf_config)
        n = int(config.get("num_hidden_layers") or 48)
        if not config.get("layer_types"):
            config["layer_types"] = ["full_attention" if i == 0 or (i + 1) % 6 == 0 else "sliding_attention"
                                     for i in range(n)]
        if not config.get("mlp_layer_types"):
            config["mlp_layer_types"] = ["dense"] + ["sparse"] * (n - 1)
        if not config.get("rope_parameters"):
            config["rope_parameters"] = {
                kind: {"rope_type": "default", "rope_theta": theta, "partial_rotary_factor": 0.334}
                for kind, theta in (("full_attention", 5_000_000.0), ("sliding_attention", 10_000.0))
            }
        return config

    @property
    def qk_norm(self) -> bool:
        """MiMo has no q/k norms."""
        return False

    @property
    def layer_types(self) -> list[str]:
        """``full_attention`` / ``sliding_attention`` per layer."""
        return list(self.get("layer_types"))

    def num_experts(self) -> int:
        """Routed experts per MoE layer."""
        return int(self.get("n_routed_experts", "num_local_experts"))

    def is_moe_layer(self, i: int) -> bool:
        """Whether layer ``i`` is sparse (``mlp_layer_types``; default: all but the first)."""
        return self.get("mlp_layer_types")[i] == "sparse"

    def layer_groups(self, i: int) -> int:
        """Layer ``i``'s kv heads: the sliding layers have twice ``num_key_value_heads``."""
        return self.num_groups * (2 if self.layer_types[i] == "sliding_attention" else 1)

    def layer_facts(self, i: int) -> Any:
        """Layer ``i``'s :class:`~swiftcore_bridge_mimo_v2.attention.MimoLayerFacts`."""
        return self.attention_facts(self.layer_types[i])

    def attention_facts(self, kind: str) -> Any:
        """The :class:`~swiftcore_bridge_mimo_v2.attention.MimoLayerFacts` of a ``full_attention`` or
        ``sliding_attention`` layer (the MTP layer's attention is a sliding one)."""
        from swiftcore_bridge_mimo_v2.attention import MimoLayerFacts

        rope = self.rope(kind)
        scale = self.get("attention_value_scale", default=None)
        groups = self.num_groups * (2 if kind == "sliding_attention" else 1)
        return MimoLayerFacts(
            num_kv_heads=groups, head_dim=self.head_dim, v_head_dim=int(self.get("v_head_dim")),
            rotary_dim=int(self.head_dim * float(rope.get("partial_rotary_factor", 0.334))),
            rope_theta=float(rope["rope_theta"]),
            sliding_window=int(self.get("sliding_window")) if kind == "sliding_attention" else None,
            sinks=kind == "sliding_attention", value_scale=1.0 if scale is None else float(scale),
        )

    def rope(self, kind: str) -> dict[str, Any]:
        """The rope parameters of a layer type, refusing rope scaling.

        Raises:
            BridgeError: for a rope type other than plain rotary.
        """
        params = (self.get("rope_parameters", default=None) or {}).get(kind)
        if not params or params.get("rope_type", "default") != "default" or "rope_theta" not in params:
            raise BridgeError(
                f"config.json: rope_parameters[{kind!r}]={params!r}: the mimo_v2_flash bridge converts plain "
                "rotary (rope_type 'default' with a rope_theta) only"
            )
        return params

    def _check_supported(self) -> None:
        super()._check_supported()
        if not self.get("norm_topk_prob", default=True):
            raise BridgeError("config.json: norm_topk_prob=false does not match megatron's sigmoid router")
        for i in range(self.num_layers):
            self.layer_facts(i)  # refuses unsupported rope

    def _ffn_dims(self) -> dict[str, int]:
        dims = {"moe_intermediate_size": int(self.get("moe_intermediate_size"))}
        if not all(self.is_moe_layer(i) for i in range(self.num_layers)):
            dims["intermediate_size"] = int(self.get("intermediate_size"))
        return dims

    def validate_parallelism(self, tp: int, ep: int) -> None:
        """TP must also divide the sliding layers' kv heads (twice the full layers')."""
        super().validate_parallelism(tp, ep)
        for i in range(self.num_layers):
            if self.layer_groups(i) % tp:
                raise ParallelismError(f"--tp {tp} does not divide layer {i}'s {self.layer_groups(i)} kv heads")

    def _config_kwargs(self, *, tp: int, ep: int, params_dtype: Any) -> dict[str, Any]:
        kwargs = super()._config_kwargs(tp=tp, ep=ep, params_dtype=params_dtype)
        kwargs.update(
            moe_router_score_function="sigmoid",
            moe_router_enable_expert_bias=True,
            moe_router_topk_scaling_factor=float(self.get("routed_scaling_factor", default=1.0)),
            moe_router_num_groups=int(self.get("n_group", default=1)),
            moe_router_group_topk=int(self.get("topk_group", default=1)),
            moe_router_pre_softmax=False,
        )
        return kwargs

    def layer_spec(self, config: Any) -> Any:
        """megatron's local decoder block spec (dense or MoE MLP per layer), each layer with a ``MimoAttention``."""
        from megatron.core.transformer.spec_utils import ModuleSpec

        from swiftcore_bridge_mimo_v2.attention import MimoAttention

        spec = super().layer_spec(config)
        layers = []
        for i, layer in enumerate(spec.layer_specs):
            layer = copy.copy(layer)  # the block spec shares one layer spec between layers of a kind
            layer.submodules = copy.copy(layer.submodules)
            layer.submodules.self_attention = ModuleSpec(module=MimoAttention, params={"facts": self.layer_facts(i)})
            layers.append(layer)
        spec.layer_specs = layers
        return spec

    def mtp_block_spec(self, config: Any, layer_spec: Any) -> Any:
        """With MTP, megatron's MTP block whose layer is a dense layer with a sliding-window attention."""
        if not self.mtp_layers:
            return None
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_mtp_block_spec
        from megatron.core.transformer.enums import AttnMaskType
        from megatron.core.transformer.spec_utils import ModuleSpec

        from swiftcore_bridge_mimo_v2.attention import MimoAttention

        dense = next(i for i in range(self.num_layers) if not self.is_moe_layer(i))
        layer = copy.copy(layer_spec.layer_specs[dense])
        layer.submodules = copy.copy(layer.submodules)
        # megatron's MTP layer reads the mask type off the attention spec (MimoAttention masks causally itself).
        params = {"facts": self.attention_facts("sliding_attention"), "attn_mask_type": AttnMaskType.causal}
        layer.submodules.self_attention = ModuleSpec(module=MimoAttention, params=params)
        return get_gpt_mtp_block_spec(config, layer, use_transformer_engine=False)

    def transformer_config(self, *, tp: int = 1, ep: int = 1, params_dtype: Any = None) -> Any:
        """The GPT-MoE config; with MTP, ``mtp_num_layers``."""
        config = super().transformer_config(tp=tp, ep=ep, params_dtype=params_dtype)
        if self.mtp_layers:
            config.mtp_num_layers = self.mtp_layers
        return config

    def rules(self) -> list[Rule]:
        """The model's rules; with MTP, the built MTP layer's: a sliding dense layer's, renamed, and the glue."""
        rules = super().rules()
        if not self.mtp_layers:
            return rules
        sliding = self.layer_types.index("sliding_attention") if "sliding_attention" in self.layer_types else None
        if sliding is None:
            raise BridgeError("config.json: an MTP layer needs the sliding-window attention facts; no layer is sliding")
        m, h = f"decoder.layers.{sliding}.", f"{self.hf_prefix}layers.{sliding}."
        mtp, out = "mtp.layers.0.", self.mtp_prefix

        def moved(rule: Rule) -> Rule:  # the release names the MTP layer's pre-MLP norm pre_mlp_layernorm
            hf = tuple(out + k.removeprefix(h).replace("post_attention_layernorm", "pre_mlp_layernorm")
                       for k in rule.hf)  # fmt: skip
            return dataclasses.replace(rule, mcore=mtp + "transformer_layer." + rule.mcore.removeprefix(m), hf=hf)

        from swiftcore_bridge_gpt import GPTBridge

        layer = [*self.attention_rules(sliding), *GPTBridge.mlp_rules(self, sliding)]  # a dense MLP, not its MoE
        return [*rules, *map(moved, layer),
                Rule(mtp + "enorm.weight", (out + "enorm.weight",)),
                Rule(mtp + "hnorm.weight", (out + "hnorm.weight",)),
                Rule(mtp + "eh_proj.weight", (out + "eh_proj.weight",), shard=COLUMN),
                Rule(mtp + "final_layernorm.weight", (out + "final_layernorm.weight",))]  # fmt: skip

    def model_kwargs(self) -> dict[str, Any]:
        """The attention applies its own per-layer rotary: the GPTModel gets no position embedding."""
        return {**super().model_kwargs(), "position_embedding_type": "none"}

    def rope_theta(self) -> float:
        """The full layers' rotary base (GPTModel's own rotary is off; each layer has its own)."""
        return float(self.rope("full_attention")["rope_theta"])

    def attention_rules(self, i: int) -> list[Rule]:
        """Layer ``i``'s input norm, grouped QKV, output projection and (sliding layers) sinks."""
        m, h = f"decoder.layers.{i}.", f"{self.hf_prefix}layers.{i}."
        a, s = h + "self_attn.", m + "self_attention."
        fuse = GroupedQKV(self.num_heads, self.layer_groups(i), self.head_dim, int(self.get("v_head_dim")))
        rules = [
            Rule(m + "input_layernorm.weight", (h + "input_layernorm.weight",)),
            Rule(s + "linear_qkv.weight", (a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"), fuse,
                 COLUMN),
            Rule(s + "linear_proj.weight", (a + "o_proj.weight",), shard=ROW),
        ]
        if self.layer_types[i] == "sliding_attention":
            rules.append(Rule(s + "softmax_offset", (a + "attention_sink_bias",), shard=COLUMN))
        return rules

    def moe_rules(self, i: int) -> list[Rule]:
        """The Qwen3-MoE expert rules plus the router's expert bias."""
        m, h = f"decoder.layers.{i}.", f"{self.hf_prefix}layers.{i}."
        rules = super().moe_rules(i)
        rules.insert(2, Rule(m + "mlp.router.expert_bias", (h + "mlp.gate.e_score_correction_bias",)))
        return rules
