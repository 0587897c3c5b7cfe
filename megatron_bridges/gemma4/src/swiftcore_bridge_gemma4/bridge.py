"""Gemma 4 bridge: the text decoder of ``gemma4`` / ``gemma4_text`` checkpoints <-> a megatron-core GPTModel.

The multimodal checkpoint (``Gemma4ForConditionalGeneration``) holds the text decoder under
``model.language_model.``; a text-only one (``Gemma4ForCausalLM``, ``gemma4_text``) under ``model.``.
The vision and audio towers and their embedders (``model.vision_tower.``, ``model.audio_tower.``,
``model.embed_vision.``, ``model.embed_audio.``) stay Hugging Face tensors, carried through unchanged.

The megatron model is :class:`~swiftcore_bridge_gemma4.model.Gemma4GPTModel` with this bridge's own
layer spec (:func:`~swiftcore_bridge_gemma4.layer.gemma4_block_spec`); what each layer is comes from
:func:`~swiftcore_bridge_gemma4.facts.layer_facts`, which the tensor rules below read as well.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from swiftcore_bridge_gpt import GATE_UP, GPTBridge
from swiftcore_megatron import COLUMN, QKV, ROW, BridgeError, Concat, MegatronBridge, ParallelismError, Rule, Shard

from swiftcore_bridge_gemma4.facts import LayerFacts, layer_facts
from swiftcore_bridge_gemma4.mapping import QK

__all__ = ["Gemma4Bridge"]

#: HF ``hidden_activation`` values the bridge maps (name -> how megatron's config gets the function).
ACTIVATIONS = ("gelu_pytorch_tanh", "gelu", "silu")

#: The experts' fused ``gate_up`` ``[E, 2I, H]``: TP splits gate and up (dim 1) separately.
EXPERT_GATE_UP = Shard(1, blocks=2)
#: The experts' fused ``down`` ``[E, H, I]``: TP splits the intermediate size (dim 2).
EXPERT_DOWN = Shard(2)


class Gemma4Bridge(GPTBridge):
    """Gemma 4's text decoder (dense or with the MoE block), towers carried through.

    Mapped: plain RMSNorms (transformers 5.19 has no ``1 + weight``), embedding scale, per-layer
    input embeddings, sliding and full attention with their own rope and head sizes, q/k/v norms,
    ``attention_k_eq_v``, KV sharing, double-wide MLPs, the MoE block beside the dense MLP,
    post-attention/feed-forward norms, layer scalars, final logit soft-capping. Tensor
    parallelism: yes; expert parallelism: no (the experts
    are stored fused, as transformers saves them).
    """

    model_types = ("gemma4", "gemma4_text")
    passthrough_prefixes = ("model.vision_tower.", "model.audio_tower.", "model.embed_vision.", "model.embed_audio.")
    # The per-layer input embeddings are split over TP ranks before their projection norm is applied per slice.
    tp_partial_gradients = ("per_layer_embedding.projection_norm",)

    def __init__(self, hf_config: Mapping[str, Any]) -> None:
        super().__init__(hf_config)
        self.hf_prefix = "model.language_model." if self.hf_config.get("model_type") == "gemma4" else "model."

    def select_config(self, hf_config: dict[str, Any]) -> dict[str, Any]:
        """The ``text_config`` (or the whole config of a ``gemma4_text`` checkpoint), with the top level's tying.

        Raises:
            BridgeError: when a ``gemma4`` config.json has no ``text_config`` object.
        """
        if hf_config.get("model_type") != "gemma4":
            return dict(hf_config)
        text = hf_config.get("text_config")
        if not isinstance(text, dict):
            raise BridgeError("config.json (model_type 'gemma4') has no 'text_config' object")
        tied = hf_config.get("tie_word_embeddings", text.get("tie_word_embeddings", True))
        return {**text, "tie_word_embeddings": tied}

    # ------------------------------------------------------------------ config facts

    @functools.cached_property
    def facts(self) -> list[LayerFacts]:
        """One :class:`~swiftcore_bridge_gemma4.facts.LayerFacts` per decoder layer."""
        return layer_facts(self.config)

    @property
    def head_dim(self) -> int:
        """Channels per head of the sliding layers (the full ones may differ: see :attr:`facts`)."""
        return int(self.get("head_dim", default=256))

    @property
    def qk_norm(self) -> bool:
        """Gemma 4 always normalises queries and keys."""
        return True

    @property
    def tied(self) -> bool:
        """Gemma 4 ties the output head to the embedding by default."""
        return bool(self.get("tie_word_embeddings", default=True))

    @property
    def per_layer_input_size(self) -> int:
        """HF ``hidden_size_per_layer_input`` (0 or absent: no per-layer input embeddings)."""
        return int(self.get("hidden_size_per_layer_input", default=0) or 0)

    @property
    def moe(self) -> bool:
        """Whether every layer has the MoE block beside its dense MLP (``enable_moe_block``)."""
        return bool(self.get("enable_moe_block", default=False))

    def placeholder_token_ids(self) -> tuple[int, ...]:
        """Image/video/audio placeholder ids of a multimodal checkpoint (they embed as the pad token)."""
        if self.hf_config.get("model_type") != "gemma4":
            return ()
        names = ("image_token_id", "video_token_id", "audio_token_id")
        return tuple(int(self.hf_config[n]) for n in names if self.hf_config.get(n) is not None)

    def _check_supported(self) -> None:
        if self.get("attention_bias", default=False):
            raise BridgeError("config.json: attention_bias=true is not supported by the gemma4 bridge")
        act = self.get("hidden_activation", "hidden_act", default="gelu_pytorch_tanh")
        if act not in ACTIVATIONS:
            raise BridgeError(
                f"config.json: hidden_activation={act!r}; the gemma4 bridge maps {', '.join(ACTIVATIONS)}")
        if self.get("use_bidirectional_attention", default=None) == "all":
            raise BridgeError("config.json: use_bidirectional_attention='all' (an encoder) is not supported; "
                              "the gemma4 bridge converts causal decoders")
        if self.moe:
            for name in ("num_experts", "top_k_experts", "moe_intermediate_size"):
                self.get(name)  # raises BridgeError naming the missing field
        self.facts  # noqa: B018 - validates layer types, overrides, rope types and kv sharing

    # ------------------------------------------------------------------ megatron-core model

    def activation(self) -> Any:
        """The MLP / per-layer-gate activation of ``hidden_activation`` as a torch function."""
        import torch.nn.functional as F

        act = self.get("hidden_activation", "hidden_act", default="gelu_pytorch_tanh")
        return {"gelu_pytorch_tanh": functools.partial(F.gelu, approximate="tanh"), "gelu": F.gelu,
                "silu": F.silu}[act]

    def transformer_config(self, *, tp: int = 1, ep: int = 1, params_dtype: Any = None) -> Any:
        """TransformerConfig: the GPT settings with Gemma's activation and softmax scale 1.

        Per-layer head sizes, kv heads, MLP widths and rotary settings are not in the config: each
        layer reads its :class:`~swiftcore_bridge_gemma4.facts.LayerFacts` from the layer spec.
        """
        import torch
        from megatron.core.transformer import TransformerConfig

        self._check_supported()
        kwargs = self._config_kwargs(tp=tp, ep=ep, params_dtype=params_dtype or torch.float32)
        kwargs.update(num_query_groups=self.facts[0].num_kv_heads, kv_channels=self.facts[0].head_dim,
                      softmax_scale=1.0)
        return TransformerConfig(**kwargs, activation_func=self.activation())

    def layer_spec(self, config: Any) -> Any:
        """The decoder block spec of :func:`~swiftcore_bridge_gemma4.layer.gemma4_block_spec`."""
        from swiftcore_bridge_gemma4.layer import gemma4_block_spec

        moe = {}
        if self.moe:
            moe = dict(num_experts=int(self.get("num_experts")), top_k=int(self.get("top_k_experts")),
                       moe_ffn_hidden_size=int(self.get("moe_intermediate_size")))
        return gemma4_block_spec(self.facts, per_layer_input_size=self.per_layer_input_size, **moe)

    def model_kwargs(self) -> dict[str, Any]:
        """:class:`~swiftcore_bridge_gemma4.model.Gemma4GPTModel` arguments."""
        cap = self.get("final_logit_softcapping", default=None)
        return dict(
            vocab_size=int(self.get("vocab_size")),
            max_sequence_length=int(self.get("max_position_embeddings", default=4096)),
            share_embeddings_and_output_weights=self.tied,
            per_layer_input_size=self.per_layer_input_size,
            per_layer_vocab_size=int(self.get("vocab_size_per_layer_input", default=0) or 0),
            final_logit_softcapping=float(cap) if cap else None,
            placeholder_token_ids=self.placeholder_token_ids(),
            pad_token_id=int(self.get("pad_token_id", default=0) or 0),
        )

    def build_model(self, *, tp: int = 1, ep: int = 1, params_dtype: Any = None) -> Any:
        """Build the :class:`~swiftcore_bridge_gemma4.model.Gemma4GPTModel` on CPU (parallel state initialised)."""
        from swiftcore_bridge_gemma4.model import Gemma4GPTModel

        config = self.transformer_config(tp=tp, ep=ep, params_dtype=params_dtype)
        return Gemma4GPTModel(config=config, transformer_layer_spec=self.layer_spec(config), pre_process=True,
                              post_process=True, **self.model_kwargs())

    def validate_parallelism(self, tp: int, ep: int) -> None:
        """TP must divide the heads of every layer, the MLP and expert widths, both vocabularies and the PLE size.

        Raises:
            ParallelismError: for ``--ep`` > 1 (the experts are fused) or a TP size that does not divide.
        """
        if ep > 1:
            raise ParallelismError(
                f"--ep {ep}: the gemma4 bridge keeps the experts fused as transformers stores them "
                "(experts.gate_up_proj), so it shards them by tensor parallelism only; use --ep 1"
            )
        MegatronBridge.validate_parallelism(self, tp, ep)
        self._check_supported()
        dims = {"num_attention_heads": self.num_heads, "vocab_size": int(self.get("vocab_size"))}
        for f in self.facts:
            dims[f"num_key_value_heads (layer {f.index}, {f.layer_type})"] = f.num_kv_heads
            dims[f"intermediate_size (layer {f.index})"] = f.ffn_hidden_size
        if self.per_layer_input_size:
            dims["hidden_size_per_layer_input"] = self.per_layer_input_size
            dims["vocab_size_per_layer_input"] = int(self.get("vocab_size_per_layer_input"))
        if self.moe:
            dims["moe_intermediate_size"] = int(self.get("moe_intermediate_size"))
        bad = {k: v for k, v in dims.items() if v % tp}
        if bad:
            raise ParallelismError(
                f"--tp {tp} does not divide config.json {', '.join(f'{k}={v}' for k, v in bad.items())}; "
                f"use a --tp that divides all of them"
            )

    def is_passthrough(self, hf_key: str) -> bool:
        """The towers, and k/v weights of kv-shared layers (released checkpoints may hold them; HF ignores them)."""
        if super().is_passthrough(hf_key):
            return True
        prefix = self.hf_prefix + "layers."
        if not hf_key.startswith(prefix):
            return False
        index, _, rest = hf_key[len(prefix):].partition(".")
        unused = tuple(f"self_attn.{name}." for name in ("k_proj", "v_proj", "k_norm", "v_norm"))
        return (index.isdigit() and int(index) < len(self.facts) and self.facts[int(index)].kv_shared
                and rest.startswith(unused))

    # ------------------------------------------------------------------ tensor rules

    def rules(self) -> list[Rule]:
        """Embeddings (token and per-layer), every decoder layer, final norm, untied output head."""
        p = self.hf_prefix
        rules = [Rule("embedding.word_embeddings.weight", (p + "embed_tokens.weight",), shard=COLUMN)]
        if self.per_layer_input_size:
            e = "per_layer_embedding."
            rules += [
                Rule(e + "embed_tokens.weight", (p + "embed_tokens_per_layer.weight",), shard=COLUMN),
                Rule(e + "model_projection.weight", (p + "per_layer_model_projection.weight",), shard=COLUMN),
                Rule(e + "projection_norm.weight", (p + "per_layer_projection_norm.weight",)),
            ]
        for f in self.facts:
            rules += self.attention_rules(f.index)
            rules += self.mlp_rules(f.index)
            rules += self.layer_extra_rules(f.index)
        rules.append(Rule("decoder.final_layernorm.weight", (p + "norm.weight",)))
        if not self.tied:
            rules.append(Rule("output_layer.weight", (self.hf_lm_head,), shard=COLUMN))
        return rules

    def attention_rules(self, i: int) -> list[Rule]:
        """Layer ``i``'s input norm, attention (by kind: own q/k/v, k-eq-v, kv-shared) and post-attention norm."""
        f = self.facts[i]
        m, h = f"decoder.layers.{i}.", f"{self.hf_prefix}layers.{i}."
        a, s = h + "self_attn.", m + "self_attention."
        rules = [
            Rule(m + "input_layernorm.weight", (h + "input_layernorm.weight",)),
            Rule(m + "post_attention_layernorm.weight", (h + "post_attention_layernorm.weight",)),
            Rule(s + "q_layernorm.weight", (a + "q_norm.weight",)),
            Rule(s + "linear_proj.weight", (a + "o_proj.weight",), shard=ROW),
        ]
        if f.kv_shared:
            return [*rules, Rule(s + "linear_q.weight", (a + "q_proj.weight",), shard=COLUMN)]
        if f.k_eq_v:
            qkv = Rule(s + "linear_qkv.weight", (a + "q_proj.weight", a + "k_proj.weight"),
                       QK(self.num_heads, f.num_kv_heads, f.head_dim), COLUMN)
        else:
            qkv = Rule(s + "linear_qkv.weight", (a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"),
                       QKV(self.num_heads, f.num_kv_heads, f.head_dim), COLUMN)
        return [*rules, qkv, Rule(s + "k_layernorm.weight", (a + "k_norm.weight",))]

    def mlp_rules(self, i: int) -> list[Rule]:
        """Layer ``i``'s dense MLP with its pre and post norms, and the MoE block when enabled."""
        m, h = f"decoder.layers.{i}.", f"{self.hf_prefix}layers.{i}."
        rules = [
            Rule(m + "pre_mlp_layernorm.weight", (h + "pre_feedforward_layernorm.weight",)),
            Rule(m + "mlp.linear_fc1.weight", (h + "mlp.gate_proj.weight", h + "mlp.up_proj.weight"), Concat(2),
                 GATE_UP),
            Rule(m + "mlp.linear_fc2.weight", (h + "mlp.down_proj.weight",), shard=ROW),
            Rule(m + "post_mlp_layernorm.weight", (h + "post_feedforward_layernorm.weight",)),
        ]
        if self.facts[i].moe:
            rules += [
                Rule(m + "post_dense_mlp_layernorm.weight", (h + "post_feedforward_layernorm_1.weight",)),
                Rule(m + "pre_moe_layernorm.weight", (h + "pre_feedforward_layernorm_2.weight",)),
                Rule(m + "post_moe_layernorm.weight", (h + "post_feedforward_layernorm_2.weight",)),
                Rule(m + "moe.router.weight", (h + "router.proj.weight",)),
                Rule(m + "moe.router.scale", (h + "router.scale",)),
                Rule(m + "moe.router.per_expert_scale", (h + "router.per_expert_scale",)),
                Rule(m + "moe.experts.gate_up_weight", (h + "experts.gate_up_proj",), shard=EXPERT_GATE_UP),
                Rule(m + "moe.experts.down_weight", (h + "experts.down_proj",), shard=EXPERT_DOWN),
            ]
        return rules

    def layer_extra_rules(self, i: int) -> list[Rule]:
        """Layer ``i``'s per-layer input gate, projection and norm, and its layer scalar."""
        m, h = f"decoder.layers.{i}.", f"{self.hf_prefix}layers.{i}."
        rules = []
        if self.per_layer_input_size:
            rules += [
                Rule(m + "per_layer_input_gate.weight", (h + "per_layer_input_gate.weight",), shard=COLUMN),
                Rule(m + "per_layer_projection.weight", (h + "per_layer_projection.weight",), shard=ROW),
                Rule(m + "post_per_layer_input_norm.weight", (h + "post_per_layer_input_norm.weight",)),
            ]
        return [*rules, Rule(m + "layer_scalar", (h + "layer_scalar",))]
