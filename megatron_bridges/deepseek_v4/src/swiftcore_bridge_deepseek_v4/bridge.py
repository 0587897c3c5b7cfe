"""DeepSeek-V4 bridge: HF ``deepseek_v4`` checkpoints <-> megatron-core, through this bridge's own layer spec.

What the transformers 5.19 model computes and where it lives on the megatron side (the full table
is in the distribution's README): hyper-connections -> ``attn_hc``/``ffn_hc`` of
:class:`~swiftcore_bridge_deepseek_v4.layer.DeepseekV4TransformerLayer` and the decoder's
``final_layernorm.hc_head``; every attention type ->
:class:`~swiftcore_bridge_deepseek_v4.attention.DeepseekV4Attention` (``compressor`` for HCA/CSA,
``indexer`` for CSA); top-k and hash-routed MoE -> megatron's ``MoELayer``
with :mod:`~swiftcore_bridge_deepseek_v4.moe`'s routers, megatron's ``SequentialMLP`` experts and
``SharedExpertMLP``; ``mtp.*`` (which transformers neither loads nor runs) is carried through unchanged.
HF tensor names are those ``save_pretrained`` writes (``model.layers.i.attn.wq_a``, ``ffn.experts.j.w1``,
``head.weight``...).

Not mapped yet: tensor parallelism (refused), yarn rope scaling of the compressor branch (refused),
MTP as megatron layers, KV-cache decoding (megatron runs prefill; the compressor's cache is HF's).
"""

from __future__ import annotations

from typing import Any

from swiftcore_bridge_gpt import GATE_UP, GPTMoEBridge
from swiftcore_megatron import COLUMN, ROW, BridgeError, Concat, MegatronBridge, ParallelismError, Rule

__all__ = ["ATTENTION_TYPES", "MLP_TYPES", "DeepseekV4Bridge"]

SLIDING, CSA, HCA = "sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"
ATTENTION_TYPES = (SLIDING, CSA, HCA)
MLP_TYPES = ("hash_moe", "moe")
#: transformers' legacy per-layer ``compress_ratios`` values.
_RATIO_TO_TYPE = {0: SLIDING, 4: CSA, 128: HCA}


class DeepseekV4Bridge(GPTMoEBridge):
    """DeepSeek-V4 (``deepseek_v4``): attention of its type and an MoE per layer, joined by hyper-connections."""

    model_types = ("deepseek_v4",)
    passthrough_prefixes = ("mtp.",)
    hf_lm_head = "head.weight"

    def select_config(self, hf_config: dict[str, Any]) -> dict[str, Any]:
        """config.json with V4's implicit facts made explicit: the shared expert's width is the experts'."""
        config = dict(hf_config)
        config.setdefault("intermediate_size", config.get("moe_intermediate_size"))
        return config

    # ------------------------------------------------------------------ config facts

    @property
    def qk_norm(self) -> bool:
        """V4 normalises its query bottleneck and its key/value head (mapped explicitly, not as megatron's qk norm)."""
        return False

    def num_experts(self) -> int:
        """Routed experts per MoE layer."""
        return int(self.get("n_routed_experts"))

    def is_moe_layer(self, i: int) -> bool:
        """Every V4 layer routes (``hash_moe`` or ``moe``)."""
        return True

    @property
    def attention_types(self) -> list[str]:
        """Per layer attention type, resolved as transformers' ``DeepseekV4Config`` does.

        Raises:
            BridgeError: wrong length or an unknown type.
        """
        n = self.num_layers
        types = self.get("layer_types", default=None)
        if types is None and self.get("compress_ratios", default=None) is not None:
            types = [_RATIO_TO_TYPE.get(r, f"compress_ratio={r}") for r in self.get("compress_ratios")]
        if types is None:
            types = [HCA] * min(n, 2) + [CSA if i % 2 else HCA for i in range(max(n - 2, 0))]
        return self._checked("layer_types", list(types)[:n], ATTENTION_TYPES)

    @property
    def mlp_types(self) -> list[str]:
        """Per layer ``hash_moe`` or ``moe`` (default: the first ``num_hash_layers`` (3) hash-routed)."""
        n = self.num_layers
        types = self.get("mlp_layer_types", default=None)
        if types is None:
            hashed = int(self.get("num_hash_layers", default=3))
            types = ["hash_moe"] * min(n, hashed) + ["moe"] * max(0, n - hashed)
        return self._checked("mlp_layer_types", list(types)[:n], MLP_TYPES)

    def _checked(self, field: str, types: list[str], allowed: tuple[str, ...]) -> list[str]:
        bad = sorted({t for t in types if t not in allowed})
        if len(types) != self.num_layers or bad:
            raise BridgeError(
                f"config.json {field}={types!r}: expected {self.num_layers} entries (num_hidden_layers), "
                f"each one of {', '.join(allowed)}"
            )
        return types

    def compress_rates(self) -> dict[str, int]:
        """Tokens per compressed entry of CSA and HCA layers (defaults 4 and 128, as transformers)."""
        rates = {CSA: 4, HCA: 128, **(self.get("compress_rates", default=None) or {})}
        for key, legacy in ((CSA, "compress_rate_csa"), (HCA, "compress_rate_hca")):
            rates[key] = int(self.get(legacy, default=rates[key]))
        return rates

    def rope_bases(self) -> tuple[float, float]:
        """``(main, compress)`` rotary bases, refusing scaled rope the modules do not implement."""
        params = self.get("rope_parameters", default=None) or {}
        bases = []
        for label, field, default in (("main", "rope_theta", 10000.0), ("compress", "compress_rope_theta", 160000.0)):
            sub = params.get(label) if isinstance(params.get(label), dict) else {}
            kind = sub.get("rope_type", "default")
            if kind != "default":
                raise BridgeError(
                    f"config.json rope_parameters.{label}.rope_type={kind!r}: the deepseek_v4 bridge implements plain "
                    "rotary only (yarn on the compressor branch is not mapped yet); convert a checkpoint without it"
                )
            bases.append(float(sub.get("rope_theta", self.get(field, default=default))))
        return bases[0], bases[1]

    def rope_dim(self) -> int:
        """Rotated trailing channels per head (``qk_rope_head_dim`` = ``head_dim * partial_rotary_factor``)."""
        if self.get("qk_rope_head_dim", default=None) is not None:
            return int(self.get("qk_rope_head_dim"))
        return int(self.head_dim * float(self.get("partial_rotary_factor", default=64 / 512)))

    def _check_supported(self) -> None:
        super()._check_supported()
        if int(self.get("num_key_value_heads", default=1)) != 1:
            raise BridgeError("config.json num_key_value_heads must be 1: DeepSeek-V4 attention has one shared KV head")
        heads, groups = self.num_heads, int(self.get("o_groups"))
        if heads % groups:
            raise BridgeError(f"config.json o_groups={groups} does not divide num_attention_heads={heads}")
        if self.get("scoring_func", default="sqrtsoftplus") not in ("sqrtsoftplus", "sigmoid"):
            raise BridgeError(
                f"config.json scoring_func={self.get('scoring_func')!r}: the deepseek_v4 bridge routes with "
                "'sqrtsoftplus' or 'sigmoid'"
            )
        self.rope_bases()

    # ------------------------------------------------------------------ megatron-core model

    def validate_parallelism(self, tp: int, ep: int) -> None:
        """Expert parallelism as for any MoE; tensor parallelism is not mapped for V4 yet."""
        if tp != 1:
            raise ParallelismError(
                f"--tp {tp}: the deepseek_v4 bridge converts at --tp 1 only for now (the shared KV head, the "
                "compressors and the indexer have no tensor-parallel split yet); use --tp 1 (and --ep for the experts)"
            )
        MegatronBridge.validate_parallelism(self, tp, ep)
        self._check_supported()

    def transformer_config(self, *, tp: int = 1, ep: int = 1, params_dtype: Any = None) -> Any:
        """:class:`~swiftcore_bridge_deepseek_v4.config.DeepseekV4TransformerConfig` matching config.json."""
        import torch
        import torch.nn.functional as F

        from swiftcore_bridge_deepseek_v4.config import DeepseekV4TransformerConfig

        self._check_supported()
        main_base, compress_base = self.rope_bases()
        kwargs = self._config_kwargs(tp=tp, ep=ep, params_dtype=params_dtype or torch.float32)
        moe_width = int(self.get("moe_intermediate_size"))
        kwargs.update(
            num_query_groups=1,
            ffn_hidden_size=moe_width,
            # HF always has one shared MLP of the experts' width (n_shared_experts is not read).
            moe_shared_expert_intermediate_size=moe_width,
            moe_router_topk_scaling_factor=float(self.get("routed_scaling_factor", default=1.0)),
            # megatron validates expert_bias only with sigmoid; the V4 routers replace the score function.
            moe_router_score_function="sigmoid",
            moe_router_enable_expert_bias=True,
            moe_router_pre_softmax=False,
            activation_func_clamp_value=float(self.get("swiglu_limit")),
            hc_mult=int(self.get("hc_mult")),
            hc_sinkhorn_iters=int(self.get("hc_sinkhorn_iters")),
            hc_eps=float(self.get("hc_eps")),
            q_lora_rank=int(self.get("q_lora_rank")),
            o_groups=int(self.get("o_groups")),
            o_lora_rank=int(self.get("o_lora_rank")),
            index_n_heads=int(self.get("index_n_heads")),
            index_head_dim=int(self.get("index_head_dim")),
            index_topk=int(self.get("index_topk")),
            sliding_window=int(self.get("sliding_window")),
            attention_layer_types=tuple(self.attention_types),
            mlp_layer_types=tuple(self.mlp_types),
            compress_rates=self.compress_rates(),
            rope_theta=main_base,
            compress_rope_theta=compress_base,
            qk_rope_head_dim=self.rope_dim(),
            router_score_function=str(self.get("scoring_func", default="sqrtsoftplus")),
            hash_vocab_size=int(self.get("vocab_size")),
        )
        return DeepseekV4TransformerConfig(**kwargs, activation_func=F.silu)

    def layer_spec(self, config: Any) -> Any:
        """:func:`~swiftcore_bridge_deepseek_v4.spec.deepseek_v4_block_spec`."""
        from swiftcore_bridge_deepseek_v4.spec import deepseek_v4_block_spec

        return deepseek_v4_block_spec(config)

    def model_kwargs(self) -> dict[str, Any]:
        """GPTModel arguments: V4's attention applies its own rotary, so the model gets none."""
        return dict(
            vocab_size=int(self.get("vocab_size")),
            max_sequence_length=int(self.get("max_position_embeddings", default=4096)),
            position_embedding_type="none",
            share_embeddings_and_output_weights=self.tied,
        )

    def build_model(self, *, tp: int = 1, ep: int = 1, params_dtype: Any = None) -> Any:
        """:class:`~swiftcore_bridge_deepseek_v4.layer.DeepseekV4GPTModel` on CPU (model-parallel state initialised)."""
        from swiftcore_bridge_deepseek_v4.layer import DeepseekV4GPTModel

        config = self.transformer_config(tp=tp, ep=ep, params_dtype=params_dtype)
        return DeepseekV4GPTModel(config=config, transformer_layer_spec=self.layer_spec(config), pre_process=True,
                                  post_process=True, **self.model_kwargs())

    # ------------------------------------------------------------------ tensor rules

    def rules(self) -> list[Rule]:
        """Embedding, every layer (hyper-connections, attention, MoE), final collapse and norm, output head."""
        p = self.hf_prefix
        rules = [Rule("embedding.word_embeddings.weight", (p + "embed_tokens.weight",), shard=COLUMN)]
        for i in range(self.num_layers):
            rules += self.attention_rules(i)
            rules += self.mlp_rules(i)
        f = "decoder.final_layernorm."
        rules += [
            Rule(f + "hc_head.fn", (p + "hc_head.hc_fn",)),
            Rule(f + "hc_head.base", (p + "hc_head.hc_base",)),
            Rule(f + "hc_head.scale", (p + "hc_head.hc_scale",)),
            Rule(f + "norm.weight", (p + "norm.weight",)),
        ]
        if not self.tied:
            rules.append(Rule("output_layer.weight", (self.hf_lm_head,), shard=COLUMN))
        return rules

    @staticmethod
    def _hyper_rules(m: str, h: str, block: str) -> list[Rule]:
        return [Rule(f"{m}{block}_hc.{name}", (f"{h}hc_{block}_{name}",)) for name in ("fn", "base", "scale")]

    @staticmethod
    def _compressor_rules(m: str, h: str) -> list[Rule]:
        return [
            Rule(m + "linear_kv.weight", (h + "wkv.weight",)),
            Rule(m + "linear_gate.weight", (h + "wgate.weight",)),
            Rule(m + "position_bias", (h + "ape",)),
            Rule(m + "kv_layernorm.weight", (h + "norm.weight",)),
        ]

    def attention_rules(self, i: int) -> list[Rule]:
        """Layer ``i``'s input norm, attention hyper-connection and attention (with compressor and indexer)."""
        m, h = f"decoder.layers.{i}.", f"{self.hf_prefix}layers.{i}."
        a, s = h + "attn.", m + "self_attention."
        rules = [Rule(m + "input_layernorm.weight", (h + "attn_norm.weight",)), *self._hyper_rules(m, h, "attn")]
        rules += [
            Rule(s + "linear_q_down_proj.weight", (a + "wq_a.weight",)),
            Rule(s + "q_layernorm.weight", (a + "q_norm.weight",)),
            Rule(s + "linear_q_up_proj.weight", (a + "wq_b.weight",)),
            Rule(s + "linear_kv.weight", (a + "wkv.weight",)),
            Rule(s + "kv_layernorm.weight", (a + "norm.weight",)),
            Rule(s + "linear_o_down_proj.weight", (a + "wo_a.weight",)),
            Rule(s + "linear_proj.weight", (a + "wo_b.weight",)),
            Rule(s + "sinks", (a + "attn_sink",)),
        ]
        kind = self.attention_types[i]
        if kind != SLIDING:
            rules += self._compressor_rules(s + "compressor.", a + "compressor.")
        if kind == CSA:
            rules += [
                *self._compressor_rules(s + "indexer.compressor.", a + "indexer.compressor."),
                Rule(s + "indexer.linear_q_up_proj.weight", (a + "indexer.wq_b.weight",)),
                Rule(s + "indexer.linear_weights_proj.weight", (a + "indexer.weights_proj.weight",)),
            ]
        return rules

    def mlp_rules(self, i: int) -> list[Rule]:
        """Layer ``i``'s pre-MLP norm, MLP hyper-connection, router (bias or hash table), experts, shared expert."""
        m, h = f"decoder.layers.{i}.", f"{self.hf_prefix}layers.{i}."
        f = h + "ffn."
        rules = [Rule(m + "pre_mlp_layernorm.weight", (h + "ffn_norm.weight",)), *self._hyper_rules(m, h, "ffn")]
        rules.append(Rule(m + "mlp.router.weight", (f + "gate.weight",)))
        if self.mlp_types[i] == "hash_moe":
            rules.append(Rule(m + "mlp.router.tid2eid", (f + "gate.tid2eid",)))
        else:
            rules.append(Rule(m + "mlp.router.expert_bias", (f + "gate.bias",)))
        local = m + "mlp.experts.local_experts.{expert}."
        for j in range(self.num_experts()):
            e = f"{f}experts.{j}."
            rules += [
                Rule(local + "linear_fc1.weight", (e + "w1.weight", e + "w3.weight"), Concat(2), GATE_UP, expert=j),
                Rule(local + "linear_fc2.weight", (e + "w2.weight",), shard=ROW, expert=j),
            ]
        sh = f + "shared_experts."
        rules += [
            Rule(m + "mlp.shared_experts.linear_fc1.weight", (sh + "w1.weight", sh + "w3.weight"), Concat(2), GATE_UP),
            Rule(m + "mlp.shared_experts.linear_fc2.weight", (sh + "w2.weight",), shard=ROW),
        ]
        return rules
