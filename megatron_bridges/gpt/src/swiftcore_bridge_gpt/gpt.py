"""Dense GPT and Qwen3-MoE-style bridges: HF config -> megatron-core config, layer spec and tensor rules.

Each layer type's mapping is written once (:meth:`GPTBridge.attention_rules`,
:meth:`GPTBridge.mlp_rules`, :meth:`GPTMoEBridge.moe_rules`); the converter runs it both ways.
"""

from __future__ import annotations

from typing import Any, ClassVar

from swiftcore_megatron import COLUMN, QKV, ROW, BridgeError, Concat, MegatronBridge, ParallelismError, Rule, Shard

__all__ = ["GATE_UP", "GPTBridge", "GPTMoEBridge"]

#: ``linear_fc1`` = ``[gate; up]``; TP splits gate and up separately (each rank: ``[gate_r; up_r]``).
GATE_UP = Shard(0, blocks=2)


class GPTBridge(MegatronBridge):
    """Dense decoder (Qwen3, Llama): GQA attention (optional q/k RMSNorm), gated SiLU MLP, RMSNorm.

    Raises (from the methods building the model):
        BridgeError: for config values the local spec cannot reproduce (rope scaling, biased linears,
            activations other than SiLU).
    """

    model_types: ClassVar[tuple[str, ...]] = ("qwen3", "llama")
    #: Where the decoder's tensors live in the HF checkpoint (a multimodal model nests them).
    hf_prefix = "model."
    hf_lm_head = "lm_head.weight"

    # ------------------------------------------------------------------ config facts

    @property
    def num_layers(self) -> int:
        """Decoder layers."""
        return int(self.get("num_hidden_layers"))

    @property
    def num_heads(self) -> int:
        """Query heads."""
        return int(self.get("num_attention_heads"))

    @property
    def num_groups(self) -> int:
        """Key/value heads (megatron's query groups)."""
        return int(self.get("num_key_value_heads", default=self.num_heads))

    @property
    def head_dim(self) -> int:
        """Channels per head (may differ from hidden / heads, as in Qwen3)."""
        return int(self.get("head_dim", default=int(self.get("hidden_size")) // self.num_heads))

    @property
    def qk_norm(self) -> bool:
        """Whether attention has q/k RMSNorm (Qwen3 does, Llama does not)."""
        return self.get("model_type") in ("qwen3", "qwen3_moe")

    @property
    def tied(self) -> bool:
        """Whether the output head shares the embedding."""
        return bool(self.get("tie_word_embeddings", default=False))

    def rope_theta(self) -> float:
        """The rotary base, refusing rope scaling the local spec cannot reproduce."""
        params = self.get("rope_parameters", "rope_scaling", default=None) or {}
        kind = params.get("rope_type", params.get("type", "default"))
        if kind != "default":
            raise BridgeError(
                f"config.json: rope_parameters.rope_type={kind!r} is not supported by the gpt bridge yet "
                "(only plain rotary); convert a model without rope scaling"
            )
        return float(params.get("rope_theta", self.get("rope_theta", default=10000.0)))

    def _check_supported(self) -> None:
        if self.get("attention_bias", default=False) or self.get("mlp_bias", default=False):
            raise BridgeError("config.json: attention_bias/mlp_bias=true is not supported by the gpt bridge yet")
        act = self.get("hidden_act", default="silu")
        if act != "silu":
            raise BridgeError(f"config.json: hidden_act={act!r}; the gpt bridge maps gated SiLU MLPs only")

    # ------------------------------------------------------------------ megatron-core model

    def transformer_config(self, *, tp: int = 1, ep: int = 1, params_dtype: Any = None) -> Any:
        """TransformerConfig matching the HF config (norm epsilon, kv_channels, qk norm: see the notes)."""
        import torch
        import torch.nn.functional as F
        from megatron.core.transformer import TransformerConfig

        self._check_supported()
        return TransformerConfig(**self._config_kwargs(tp=tp, ep=ep, params_dtype=params_dtype or torch.float32),
                                 activation_func=F.silu)

    def _config_kwargs(self, *, tp: int, ep: int, params_dtype: Any) -> dict[str, Any]:
        return dict(
            num_layers=self.num_layers,
            hidden_size=int(self.get("hidden_size")),
            num_attention_heads=self.num_heads,
            num_query_groups=self.num_groups,
            kv_channels=self.head_dim,
            ffn_hidden_size=int(self.get("intermediate_size")),
            normalization="RMSNorm",
            layernorm_epsilon=float(self.get("rms_norm_eps")),
            gated_linear_unit=True,
            add_bias_linear=False,
            add_qkv_bias=False,
            qk_layernorm=self.qk_norm,
            hidden_dropout=0.0,
            attention_dropout=0.0,
            use_cpu_initialization=True,
            params_dtype=params_dtype,
            tensor_model_parallel_size=tp,
            expert_model_parallel_size=ep,
            # Fusions need CUDA kernels; parity is measured without them.
            bias_activation_fusion=False,
            masked_softmax_fusion=False,
            bias_dropout_fusion=False,
            apply_rope_fusion=False,
            gradient_accumulation_fusion=False,
            persist_layer_norm=False,
        )

    def layer_spec(self, config: Any) -> Any:
        """The local (non-TE) GPT layer spec with RMSNorm and, for Qwen3, q/k layernorm."""
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

        return get_gpt_layer_local_spec(normalization="RMSNorm", qk_layernorm=self.qk_norm)

    def model_kwargs(self) -> dict[str, Any]:
        """GPTModel arguments: vocabulary, rotary base and fraction, tied head."""
        return dict(
            vocab_size=int(self.get("vocab_size")),
            max_sequence_length=int(self.get("max_position_embeddings", default=4096)),
            position_embedding_type="rope",
            rotary_base=self.rope_theta(),
            rotary_percent=float(self.get("partial_rotary_factor", default=1.0)),
            share_embeddings_and_output_weights=self.tied,
        )

    def validate_parallelism(self, tp: int, ep: int) -> None:
        """TP must divide the query heads, the kv heads, the MLP width and the vocabulary."""
        super().validate_parallelism(tp, ep)
        self._check_supported()
        dims = {
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_groups,
            "vocab_size": int(self.get("vocab_size")),
            **self._ffn_dims(),
        }
        for name, size in dims.items():
            if size % tp:
                raise ParallelismError(
                    f"--tp {tp} does not divide config.json {name}={size}; "
                    f"use a --tp that divides {', '.join(f'{k}={v}' for k, v in dims.items())}"
                )

    def _ffn_dims(self) -> dict[str, int]:
        return {"intermediate_size": int(self.get("intermediate_size"))}

    # ------------------------------------------------------------------ tensor rules

    def rules(self) -> list[Rule]:
        """Embedding, every decoder layer (attention + MLP), final norm, output head."""
        p = self.hf_prefix
        rules = [Rule("embedding.word_embeddings.weight", (p + "embed_tokens.weight",), shard=COLUMN)]
        for i in range(self.num_layers):
            rules += self.attention_rules(i)
            rules += self.mlp_rules(i)
        rules.append(Rule("decoder.final_layernorm.weight", (p + "norm.weight",)))
        if not self.tied:
            rules.append(Rule("output_layer.weight", (self.hf_lm_head,), shard=COLUMN))
        return rules

    def attention_rules(self, i: int) -> list[Rule]:
        """Layer ``i``'s input norm and self-attention (QKV interleaved per query group)."""
        m, h = f"decoder.layers.{i}.", f"{self.hf_prefix}layers.{i}."
        a = h + "self_attn."
        rules = [
            Rule(m + "input_layernorm.weight", (h + "input_layernorm.weight",)),
            Rule(
                m + "self_attention.linear_qkv.weight",
                (a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"),
                QKV(self.num_heads, self.num_groups, self.head_dim),
                COLUMN,
            ),
            Rule(m + "self_attention.linear_proj.weight", (a + "o_proj.weight",), shard=ROW),
        ]
        if self.qk_norm:
            rules += [
                Rule(m + "self_attention.q_layernorm.weight", (a + "q_norm.weight",)),
                Rule(m + "self_attention.k_layernorm.weight", (a + "k_norm.weight",)),
            ]
        return rules

    def mlp_rules(self, i: int) -> list[Rule]:
        """Layer ``i``'s pre-MLP norm and dense gated MLP."""
        m, h = f"decoder.layers.{i}.", f"{self.hf_prefix}layers.{i}."
        return [
            Rule(m + "pre_mlp_layernorm.weight", (h + "post_attention_layernorm.weight",)),
            Rule(
                m + "mlp.linear_fc1.weight",
                (h + "mlp.gate_proj.weight", h + "mlp.up_proj.weight"),
                Concat(2),
                GATE_UP,
            ),
            Rule(m + "mlp.linear_fc2.weight", (h + "mlp.down_proj.weight",), shard=ROW),
        ]


class GPTMoEBridge(GPTBridge):
    """Qwen3-MoE-style decoder: GPT attention; MLP = softmax top-k router over per-expert gated MLPs.

    Layers listed in ``mlp_only_layers`` or off the ``decoder_sparse_step`` grid keep a dense MLP.
    ``norm_topk_prob=True`` (renormalised top-k) is megatron's softmax-after-top-k
    (``moe_router_pre_softmax=False``); ``False`` is softmax-then-top-k (``pre_softmax=True``).
    Experts are read as the checkpoint stores them per expert (``mlp.experts.{j}.gate_proj``).
    """

    model_types = ("qwen3_moe",)

    def num_experts(self) -> int:
        """Routed experts per MoE layer."""
        return int(self.get("num_experts", "num_local_experts"))

    def is_moe_layer(self, i: int) -> bool:
        """Whether layer ``i`` has routed experts (Qwen3-MoE's ``decoder_sparse_step`` / ``mlp_only_layers``)."""
        step = int(self.get("decoder_sparse_step", default=1))
        only_dense = set(self.get("mlp_only_layers", default=[]) or [])
        return i not in only_dense and step > 0 and (i + 1) % step == 0

    def _ffn_dims(self) -> dict[str, int]:
        dims = {"moe_intermediate_size": int(self.get("moe_intermediate_size"))}
        if not all(self.is_moe_layer(i) for i in range(self.num_layers)):
            dims["intermediate_size"] = int(self.get("intermediate_size"))
        return dims

    def _config_kwargs(self, *, tp: int, ep: int, params_dtype: Any) -> dict[str, Any]:
        kwargs = super()._config_kwargs(tp=tp, ep=ep, params_dtype=params_dtype)
        kwargs.update(
            num_moe_experts=self.num_experts(),
            moe_router_topk=int(self.get("num_experts_per_tok")),
            moe_ffn_hidden_size=int(self.get("moe_intermediate_size")),
            moe_router_score_function="softmax",
            moe_router_pre_softmax=not bool(self.get("norm_topk_prob", default=False)),
            # Aux losses change nothing in the forward pass; off, they need no CUDA-only logging.
            moe_router_load_balancing_type="none",
            moe_aux_loss_coeff=0.0,
            moe_token_dispatcher_type="allgather",
            moe_grouped_gemm=False,
            moe_layer_freq=[int(self.is_moe_layer(i)) for i in range(self.num_layers)],
        )
        if "intermediate_size" not in self.config:
            kwargs["ffn_hidden_size"] = kwargs["moe_ffn_hidden_size"]
        return kwargs

    def layer_spec(self, config: Any) -> Any:
        """The local decoder block spec: MoE or dense MLP per layer, as ``moe_layer_freq`` says."""
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec

        return get_gpt_decoder_block_spec(config, use_transformer_engine=False, normalization="RMSNorm")

    def mlp_rules(self, i: int) -> list[Rule]:
        """Dense MLP rules for dense layers, :meth:`moe_rules` for MoE layers."""
        return self.moe_rules(i) if self.is_moe_layer(i) else super().mlp_rules(i)

    def moe_rules(self, i: int) -> list[Rule]:
        """Layer ``i``'s pre-MLP norm, router and every expert's gated MLP (placed by expert parallelism)."""
        m, h = f"decoder.layers.{i}.", f"{self.hf_prefix}layers.{i}."
        rules = [
            Rule(m + "pre_mlp_layernorm.weight", (h + "post_attention_layernorm.weight",)),
            Rule(m + "mlp.router.weight", (h + "mlp.gate.weight",)),
        ]
        local = m + "mlp.experts.local_experts.{expert}."
        for j in range(self.num_experts()):
            e = f"{h}mlp.experts.{j}."
            rules += [
                Rule(local + "linear_fc1.weight", (e + "gate_proj.weight", e + "up_proj.weight"), Concat(2), GATE_UP,
                     expert=j),
                Rule(local + "linear_fc2.weight", (e + "down_proj.weight",), shard=ROW, expert=j),
            ]
        return rules
