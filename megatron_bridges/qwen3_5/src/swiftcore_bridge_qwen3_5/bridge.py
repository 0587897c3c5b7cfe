"""Qwen3.5 bridge: hybrid gated-DeltaNet / gated-attention decoder <-> megatron-core GPTModel.

HF ``qwen3_5`` checkpoints hold the language model under ``model.language_model.`` (a text-only
``qwen3_5_text`` one under ``model.``). Per layer (HF ``layer_types``) the token mixer is either

- ``linear_attention``: a gated DeltaNet -> megatron-core's ``GatedDeltaNet``
  (``in_proj`` = ``[in_proj_qkv; in_proj_z; in_proj_b; in_proj_a]``, ``conv1d``, ``dt_bias``,
  ``A_log``, ``out_norm``, ``out_proj``), or
- ``full_attention``: attention with an output gate, q/k RMSNorm and partial rotary ->
  ``SelfAttention`` with ``attention_output_gate`` (:class:`~swiftcore_bridge_qwen3_5.mapping.GatedQKV`).

The MLP and embeddings map as in the dense GPT bridge, which this one extends. The vision tower
(``model.visual.``) and the multi-token-prediction weights (``mtp.``, which transformers does not
load either) are carried through unchanged beside the Megatron weights, so ``--to-hf`` restores the
whole checkpoint bit for bit.

:class:`Qwen3_5MoeBridge` (``qwen3_5_moe``) adds Qwen3-MoE-style routed experts with a sigmoid-gated
shared expert. Not mapped yet: mrope over image/video positions (text tokens use plain positions,
where mrope equals rope) and MTP as megatron layers (its weights are carried, not converted).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from swiftcore_bridge_gpt import GATE_UP, GPTBridge, GPTMoEBridge
from swiftcore_megatron import COLUMN, ROW, BridgeError, Concat, ParallelismError, Rule

from swiftcore_bridge_qwen3_5.mapping import GatedQKV, Sections, SectionShard

__all__ = ["Qwen3_5Bridge", "Qwen3_5MoeBridge"]

LINEAR, FULL = "linear_attention", "full_attention"


class Qwen3_5Bridge(GPTBridge):
    """Qwen3.5 (``qwen3_5``, ``qwen3_5_text``): gated DeltaNet and gated attention layers, dense MLP."""

    model_types = ("qwen3_5", "qwen3_5_text")
    passthrough_prefixes = ("model.visual.", "mtp.")
    # The gated DeltaNet's output norm is applied per value head, after the heads are split over TP ranks.
    tp_partial_gradients = ("self_attention.out_norm",)

    def __init__(self, hf_config: Mapping[str, Any]) -> None:
        super().__init__(hf_config)
        # The multimodal checkpoint nests the language model; a text-only one does not.
        self.hf_prefix = "model.language_model." if "text_config" in self.hf_config else "model."

    def select_config(self, hf_config: dict[str, Any]) -> dict[str, Any]:
        """The ``text_config`` (or the whole config of a text-only checkpoint), with the top level's tying.

        Raises:
            BridgeError: when a ``qwen3_5`` config.json has no ``text_config`` object.
        """
        if hf_config.get("model_type") == "qwen3_5_text":
            return dict(hf_config)
        text = hf_config.get("text_config")
        if not isinstance(text, dict):
            raise BridgeError("config.json (model_type 'qwen3_5') has no 'text_config' object")
        tied = hf_config.get("tie_word_embeddings", text.get("tie_word_embeddings", False))
        return {**text, "tie_word_embeddings": tied}

    # ------------------------------------------------------------------ config facts

    @property
    def qk_norm(self) -> bool:
        """Qwen3.5's full attention always has q/k RMSNorm."""
        return True

    @property
    def layer_types(self) -> list[str]:
        """Per layer ``"linear_attention"`` or ``"full_attention"`` (HF ``layer_types``).

        Raises:
            BridgeError: when the list is missing, has the wrong length or an unknown type.
        """
        types = list(self.get("layer_types", default=None) or self._default_layer_types())
        unknown = sorted({t for t in types if t not in (LINEAR, FULL)})
        if len(types) != self.num_layers or unknown:
            raise BridgeError(
                f"config.json text_config.layer_types={types!r}: expected {self.num_layers} entries "
                f"(num_hidden_layers), each {LINEAR!r} or {FULL!r}"
            )
        return types

    def _default_layer_types(self) -> list[str]:
        # transformers' default: every full_attention_interval-th layer is full attention.
        interval = int(self.get("full_attention_interval", default=4))
        return [FULL if (i + 1) % interval == 0 else LINEAR for i in range(self.num_layers)]

    def rope_params(self) -> dict[str, Any]:
        """``rope_parameters`` (transformers 5) or the older top-level fields."""
        return dict(self.get("rope_parameters", "rope_scaling", default=None) or {})

    def rotary_percent(self) -> float:
        """The rotated fraction of each head (Qwen3.5: 0.25)."""
        return float(self.rope_params().get("partial_rotary_factor",
                                            self.get("partial_rotary_factor", default=1.0)))

    def _linear_dims(self) -> dict[str, int]:
        return {
            "linear_num_key_heads": int(self.get("linear_num_key_heads")),
            "linear_num_value_heads": int(self.get("linear_num_value_heads")),
            "linear_key_head_dim": int(self.get("linear_key_head_dim")),
            "linear_value_head_dim": int(self.get("linear_value_head_dim")),
            "linear_conv_kernel_dim": int(self.get("linear_conv_kernel_dim", default=4)),
        }

    def _check_supported(self) -> None:
        super()._check_supported()
        dims = self._linear_dims()
        if dims["linear_num_value_heads"] % dims["linear_num_key_heads"]:
            raise BridgeError(
                f"config.json: linear_num_value_heads={dims['linear_num_value_heads']} is not a multiple of "
                f"linear_num_key_heads={dims['linear_num_key_heads']}; megatron's GatedDeltaNet needs it to be"
            )
        if self.get("mtp_num_hidden_layers", default=0) and self.get("mtp_use_dedicated_embeddings", default=False):
            raise BridgeError("config.json: mtp_use_dedicated_embeddings=true is not supported by this bridge")

    # ------------------------------------------------------------------ megatron-core model

    def transformer_config(self, *, tp: int = 1, ep: int = 1, params_dtype: Any = None) -> Any:
        """TransformerConfig: the GPT settings plus the gated-DeltaNet sizes, layer pattern and output gate.

        Without usable FLA kernels (a CPU), ``deterministic_mode`` selects megatron-core's PyTorch
        gated delta rule (see :mod:`swiftcore_bridge_qwen3_5.modules`).
        """
        import torch
        import torch.nn.functional as F
        from megatron.core.transformer import TransformerConfig

        from swiftcore_bridge_qwen3_5.modules import needs_torch_gated_delta_rule

        self._check_supported()
        kwargs = self._config_kwargs(tp=tp, ep=ep, params_dtype=params_dtype or torch.float32)
        kwargs.update(
            **self._moe_kwargs(),
            **self._linear_dims(),
            experimental_attention_variant="gated_delta_net",
            linear_attention_freq=[int(t == LINEAR) for t in self.layer_types],
            attention_output_gate=True,
            deterministic_mode=needs_torch_gated_delta_rule(),
        )
        return TransformerConfig(**kwargs, activation_func=F.silu)

    def _moe_kwargs(self) -> dict[str, Any]:
        return {}

    def layer_spec(self, config: Any) -> Any:
        """The decoder block spec of :func:`~swiftcore_bridge_qwen3_5.modules.qwen3_5_block_spec`."""
        from swiftcore_bridge_qwen3_5.modules import qwen3_5_block_spec

        experts = self.num_experts()
        moe = [self.is_moe_layer(i) for i in range(self.num_layers)] if experts else None
        return qwen3_5_block_spec([t == LINEAR for t in self.layer_types], moe, experts or None)

    def model_kwargs(self) -> dict[str, Any]:
        """GPTModel arguments: the GPT ones with Qwen3.5's partial rotary fraction."""
        return {**super().model_kwargs(), "rotary_percent": self.rotary_percent()}

    def rope_theta(self) -> float:
        """The rotary base; mrope (Qwen3.5's image/video positions) equals rope on text positions."""
        params = self.rope_params()
        kind = params.get("rope_type", params.get("type", "default"))
        if kind != "default":
            raise BridgeError(
                f"config.json: rope_parameters.rope_type={kind!r} is not supported by the qwen3_5 bridge yet "
                "(only plain rotary); convert a model without rope scaling"
            )
        return float(params.get("rope_theta", self.get("rope_theta", default=10000.0)))

    def validate_parallelism(self, tp: int, ep: int) -> None:
        """The GPT checks plus: TP must divide the linear-attention key and value heads."""
        super().validate_parallelism(tp, ep)
        dims = self._linear_dims()
        for name in ("linear_num_key_heads", "linear_num_value_heads"):
            if dims[name] % tp:
                raise ParallelismError(
                    f"--tp {tp} does not divide config.json {name}={dims[name]}; use a --tp that divides "
                    f"linear_num_key_heads={dims['linear_num_key_heads']} and "
                    f"linear_num_value_heads={dims['linear_num_value_heads']}"
                )

    # ------------------------------------------------------------------ tensor rules

    def attention_rules(self, i: int) -> list[Rule]:
        """Layer ``i``'s input norm and token mixer: gated DeltaNet or gated full attention."""
        if self.layer_types[i] == LINEAR:
            return self.linear_attention_rules(i)
        m, h = f"decoder.layers.{i}.", f"{self.hf_prefix}layers.{i}."
        a, s = h + "self_attn.", m + "self_attention."
        return [
            Rule(m + "input_layernorm.weight", (h + "input_layernorm.weight",)),
            Rule(
                s + "linear_qkv.weight",
                (a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"),
                GatedQKV(self.num_heads, self.num_groups, self.head_dim),
                COLUMN,
            ),
            Rule(s + "linear_proj.weight", (a + "o_proj.weight",), shard=ROW),
            Rule(s + "q_layernorm.weight", (a + "q_norm.weight",)),
            Rule(s + "k_layernorm.weight", (a + "k_norm.weight",)),
        ]

    def linear_attention_rules(self, i: int) -> list[Rule]:
        """Layer ``i``'s input norm and gated DeltaNet (projections fused into megatron's ``in_proj``)."""
        m, h = f"decoder.layers.{i}.", f"{self.hf_prefix}layers.{i}."
        a, s = h + "linear_attn.", m + "self_attention."
        d = self._linear_dims()
        qk = d["linear_num_key_heads"] * d["linear_key_head_dim"]
        v = d["linear_num_value_heads"] * d["linear_value_head_dim"]
        heads = d["linear_num_value_heads"]
        return [
            Rule(m + "input_layernorm.weight", (h + "input_layernorm.weight",)),
            Rule(
                s + "in_proj.weight",
                (a + "in_proj_qkv.weight", a + "in_proj_z.weight", a + "in_proj_b.weight", a + "in_proj_a.weight"),
                Sections((2 * qk + v, v, heads, heads)),
                SectionShard(0, sections=(qk, qk, v, v, heads, heads)),
            ),
            Rule(s + "conv1d.weight", (a + "conv1d.weight",), shard=SectionShard(0, sections=(qk, qk, v))),
            Rule(s + "dt_bias", (a + "dt_bias",), shard=COLUMN),
            Rule(s + "A_log", (a + "A_log",), shard=COLUMN),
            Rule(s + "out_norm.weight", (a + "norm.weight",)),
            Rule(s + "out_proj.weight", (a + "out_proj.weight",), shard=ROW),
        ]


class Qwen3_5MoeBridge(Qwen3_5Bridge, GPTMoEBridge):
    """Qwen3.5-MoE (``qwen3_5_moe``): the Qwen3.5 token mixers; MLP = routed experts + gated shared expert.

    Routing is softmax, top-k, renormalised (HF always renormalises: megatron's softmax after top-k);
    the shared expert's output is scaled by ``sigmoid(shared_expert_gate(x))`` (megatron's
    ``moe_shared_expert_gate``). Experts are read per expert, as ``save_pretrained`` writes them.
    """

    model_types = ("qwen3_5_moe", "qwen3_5_moe_text")

    def select_config(self, hf_config: dict[str, Any]) -> dict[str, Any]:
        """As for Qwen3.5, with the MoE text model type; routing always renormalises the top-k."""
        if hf_config.get("model_type") == "qwen3_5_moe_text":
            config = dict(hf_config)
        else:
            text = hf_config.get("text_config")
            if not isinstance(text, dict):
                raise BridgeError("config.json (model_type 'qwen3_5_moe') has no 'text_config' object")
            config = {**text, "tie_word_embeddings": hf_config.get("tie_word_embeddings",
                                                                   text.get("tie_word_embeddings", False))}
        # Every Qwen3.5-MoE layer is an MoE layer: the dense width megatron asks for is the experts'.
        config.setdefault("intermediate_size", config.get("moe_intermediate_size"))
        return {**config, "norm_topk_prob": True}

    def _shared_size(self) -> int:
        return int(self.get("shared_expert_intermediate_size", default=0))

    def _ffn_dims(self) -> dict[str, int]:
        dims = super()._ffn_dims()
        if self._shared_size():
            dims["shared_expert_intermediate_size"] = self._shared_size()
        return dims

    def _moe_kwargs(self) -> dict[str, Any]:
        shared = self._shared_size()
        return {"moe_shared_expert_intermediate_size": shared or None, "moe_shared_expert_gate": bool(shared)}

    def moe_rules(self, i: int) -> list[Rule]:
        """The Qwen3-MoE rules plus the shared expert and its sigmoid gate."""
        rules = super().moe_rules(i)
        if self._shared_size():
            m, h = f"decoder.layers.{i}.mlp.", f"{self.hf_prefix}layers.{i}.mlp."
            sh = h + "shared_expert."
            rules += [
                Rule(m + "shared_experts.linear_fc1.weight", (sh + "gate_proj.weight", sh + "up_proj.weight"),
                     Concat(2), GATE_UP),
                Rule(m + "shared_experts.linear_fc2.weight", (sh + "down_proj.weight",), shard=ROW),
                Rule(m + "shared_experts.gate_weight", (h + "shared_expert_gate.weight",)),
            ]
        return rules
