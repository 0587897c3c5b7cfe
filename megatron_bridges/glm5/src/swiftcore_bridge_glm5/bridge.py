"""The GLM-5 bridge: swiftcore-bridge-gpt's DeepSeek-V3 (MLA + MoE) bridge, with DSA sparse attention.

GLM-5 (``glm_moe_dsa``) is DeepSeek-V3's layout (MLA with low-rank q and kv, dense first layers, sigmoid
group-top-k routing with a correction bias, shared experts) plus DeepSeek Sparse Attention: each layer's
lightning indexer scores every earlier key and the attention keeps the ``index_topk`` best. megatron-core
0.16.1 expresses that with ``experimental_attention_variant="dsa"``: its ``MLASelfAttention`` then hands the
hidden state and the normalised query latent to a ``DSAttention`` core attention, whose indexer is this
bridge's :class:`~swiftcore_bridge_glm5.indexer.GlmIndexer` (GLM's rope layout, no Hadamard, eps 1e-6).
MLA's latent norms are :class:`~swiftcore_bridge_glm5.indexer.LatentRMSNorm`: transformers builds
``q_a_layernorm`` / ``kv_a_layernorm`` with eps 1e-6, not GLM-5's ``rms_norm_eps`` 1e-5 (6e-5 logit error).

Mapping (in addition to the DeepSeek-V3 bridge's): ``self_attn.indexer.{wq_b, wk, k_norm, weights_proj}``
-> ``self_attention.core_attention.indexer.{linear_wq_b, linear_wk, k_norm, linear_weights_proj}``,
replicated on every TP rank. Experts are read as ``save_pretrained`` writes them (per expert).

Multi-token prediction: a config with ``num_nextn_predict_layers: 1`` (the release's) has its MTP layer,
``model.layers.{num_hidden_layers}.*``, built as megatron-core's MTP block (:mod:`swiftcore_megatron.mtp`):
the layer's attention and MoE map as any layer's onto ``mtp.layers.0.transformer_layer.*``, ``enorm``, ``hnorm``,
``eh_proj`` (column-parallel) and ``shared_head.norm`` onto the MTP layer's norms and projection, and the layer's
own ``embed_tokens`` / ``shared_head.head`` copies onto the shared embedding and output head (:class:`Tied`).
transformers' ``GlmMoeDsaForCausalLM`` has no MTP head (it drops those tensors on load), so the tests check the
MTP logits against the layer rebuilt from transformers' own modules. Without ``num_nextn_predict_layers`` the
layers from ``num_hidden_layers`` on are carried through unchanged (``OUT/hf_passthrough/``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from swiftcore_bridge_gpt import DeepSeekV3Bridge
from swiftcore_megatron import COLUMN, BridgeError, ParallelismError, Rule, Tied

__all__ = ["Glm5Bridge"]


class Glm5Bridge(DeepSeekV3Bridge):
    """GLM-5: MLA + DSA indexer attention, dense first layers, then shared + sigmoid-routed experts.

    Raises (from the methods building the model):
        BridgeError: for ``shared`` indexer layers (cross-layer top-k reuse), an ``mlp_layer_types`` that is
            not ``first_k_dense_replace`` dense layers then MoE, an indexer head narrower than the rotary
            slice, rope scaling, biased linears (and whatever the DeepSeek-V3 bridge refuses).
    """

    model_types = ("glm_moe_dsa",)

    @property
    def mtp_layers(self) -> int:
        """MTP layers built in megatron (config.json ``num_nextn_predict_layers``; 0 or 1)."""
        return int(self.get("num_nextn_predict_layers", default=0))

    def is_passthrough(self, hf_key: str) -> bool:
        """Layers past the MTP layer (all from ``num_hidden_layers`` on, without MTP) are carried unconverted."""
        prefix = f"{self.hf_prefix}layers."
        if hf_key.startswith(prefix):
            index = hf_key[len(prefix):].split(".", 1)[0]
            if index.isdigit() and int(index) >= self.num_layers + self.mtp_layers:
                return True
        return super().is_passthrough(hf_key)

    def missing_tensors_hint(self, missing: list[str]) -> str:
        """A checkpoint saved by transformers has no MTP layer, whatever its config says: say how to convert it."""
        mtp = f"{self.hf_prefix}layers.{self.num_layers}."
        if self.mtp_layers and all(key.startswith(mtp) for key in missing):
            return (f"config.json sets num_nextn_predict_layers={self.mtp_layers}, but the checkpoint has no MTP "
                    f"layer ({mtp}*; transformers drops it on load, so a model it saved has none): set "
                    "num_nextn_predict_layers to 0 in config.json to convert the model without its MTP layer")
        return super().missing_tensors_hint(missing)

    def _check_supported(self) -> None:
        from swiftcore_bridge_gpt import GPTBridge

        super()._check_supported()
        GPTBridge._check_supported(self)  # SiLU, no biased linears: checks the DeepSeek-V3 bridge skips
        self.rope_theta()  # refuses rope scaling
        kinds = list(self.get("indexer_types", default=None) or ["full"] * self.num_layers)
        shared = [i for i, kind in enumerate(kinds) if kind != "full"]
        if shared:
            raise BridgeError(
                f"config.json: indexer_types marks layers {shared} 'shared' (they reuse an earlier layer's top-k "
                "selection); megatron-core 0.16.1's DSAttention runs its own indexer in every layer and has no "
                "cross-layer top-k hand-over, so the glm5 bridge converts only all-'full' indexer layouts"
            )
        first = int(self.get("first_k_dense_replace", default=0))
        want = ["dense"] * first + ["sparse"] * (self.num_layers - first)
        types = list(self.get("mlp_layer_types", default=None) or want)
        if types != want:
            raise BridgeError(
                f"config.json: mlp_layer_types={types} is not first_k_dense_replace={first} dense layers then MoE "
                "layers, the only layout the glm5 bridge maps"
            )
        if self.mtp_layers > 1:
            raise BridgeError(
                f"config.json: num_nextn_predict_layers={self.mtp_layers}; the glm5 bridge builds GLM-5's single "
                "MTP layer (0 or 1); convert with num_nextn_predict_layers set to 0 or 1"
            )
        if int(self.get("index_head_dim")) < int(self.get("qk_rope_head_dim")):
            raise BridgeError("config.json: index_head_dim must be at least qk_rope_head_dim (the rotary slice)")

    def transformer_config(self, *, tp: int = 1, ep: int = 1, params_dtype: Any = None) -> Any:
        """The DeepSeek-V3 ``MLATransformerConfig`` with megatron's DSA variant and the indexer's sizes."""
        config = super().transformer_config(tp=tp, ep=ep, params_dtype=params_dtype)
        config.experimental_attention_variant = "dsa"
        config.dsa_indexer_n_heads = int(self.get("index_n_heads"))
        config.dsa_indexer_head_dim = int(self.get("index_head_dim"))
        config.dsa_indexer_topk = int(self.get("index_topk"))
        # The indexer is trained apart (a KL loss against the attention); off, the LM loss alone, as in HF.
        config.dsa_indexer_loss_coeff = 0.0
        # Also: the indexer-loss tracker has num_layers slots; the MTP layer is numbered num_layers + 1.
        if self.mtp_layers:
            config.mtp_num_layers = self.mtp_layers
        return config

    def validate_parallelism(self, tp: int, ep: int) -> None:
        """The DeepSeek-V3 checks; with an MTP layer TP must also divide ``hidden_size`` (``eh_proj``'s rows)."""
        super().validate_parallelism(tp, ep)
        hidden = int(self.get("hidden_size"))
        if self.mtp_layers and hidden % tp:
            raise ParallelismError(f"--tp {tp} does not divide config.json hidden_size={hidden}, which the MTP "
                                   "layer's column-parallel eh_proj splits; use a --tp that divides it")

    def mtp_block_spec(self, config: Any, layer_spec: Any) -> Any:
        """With MTP, megatron's MTP block spec: its layer reuses the last layer's spec (MLA + DSA + MoE)."""
        if not self.mtp_layers:
            return None
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_mtp_block_spec

        return get_gpt_mtp_block_spec(config, layer_spec, use_transformer_engine=False)

    def layer_spec(self, config: Any) -> Any:
        """The DeepSeek-V3 local MLA block spec with ``DSAttention`` + :class:`GlmIndexer` as core attention."""
        from megatron.core.transformer.experimental_attention_variant.dsa import (
            DSAIndexerSubmodules,
            DSAttention,
            DSAttentionSubmodules,
        )
        from megatron.core.transformer.spec_utils import ModuleSpec

        from swiftcore_bridge_glm5.indexer import DuplicatedLinear, GlmIndexer, GlmIndexerKNorm, LatentRMSNorm

        indexer = ModuleSpec(module=GlmIndexer, submodules=DSAIndexerSubmodules(
            linear_wq_b=DuplicatedLinear, linear_wk=DuplicatedLinear, k_norm=GlmIndexerKNorm,
            linear_weights_proj=DuplicatedLinear))
        core_attention = ModuleSpec(module=DSAttention, submodules=DSAttentionSubmodules(indexer=indexer))
        spec = super().layer_spec(config)
        for layer in spec.layer_specs:
            attention = layer.submodules.self_attention.submodules
            attention.core_attention = core_attention
            attention.q_layernorm = attention.kv_layernorm = LatentRMSNorm
        return spec

    def attention_rules(self, i: int) -> list[Rule]:
        """The MLA rules plus the layer's indexer (replicated over TP ranks)."""
        a = f"{self.hf_prefix}layers.{i}.self_attn.indexer."
        s = f"decoder.layers.{i}.self_attention.core_attention.indexer."
        return [*super().attention_rules(i),
                Rule(s + "linear_wq_b.weight", (a + "wq_b.weight",)),
                Rule(s + "linear_wk.weight", (a + "wk.weight",)),
                Rule(s + "k_norm.weight", (a + "k_norm.weight",)),
                Rule(s + "k_norm.bias", (a + "k_norm.bias",)),
                Rule(s + "linear_weights_proj.weight", (a + "weights_proj.weight",))]


    def rules(self) -> list[Rule]:
        """The model's rules; with MTP, the MTP layer's, and its embedding and head copies tied to the model's."""
        rules = super().rules()
        if not self.mtp_layers:
            return rules
        h = f"{self.hf_prefix}layers.{self.num_layers}."
        copies = {"embedding.word_embeddings.weight": h + "embed_tokens.weight",
                  "output_layer.weight": h + "shared_head.head.weight"}
        rules = [dataclasses.replace(r, hf=(*r.hf, copies[r.mcore]), fuse=Tied(2)) if r.mcore in copies else r
                 for r in rules]
        return rules + self.mtp_rules()

    def mtp_rules(self) -> list[Rule]:
        """The MTP layer: a decoder layer's rules moved under ``mtp.layers.0.transformer_layer``, and its glue."""
        n, mtp = self.num_layers, "mtp.layers.0."
        layer, h = f"decoder.layers.{n}.", f"{self.hf_prefix}layers.{n}."
        rules = [dataclasses.replace(r, mcore=mtp + "transformer_layer." + r.mcore.removeprefix(layer))
                 for r in (*self.attention_rules(n), *self.mlp_rules(n))]
        return [*rules,
                Rule(mtp + "enorm.weight", (h + "enorm.weight",)),
                Rule(mtp + "hnorm.weight", (h + "hnorm.weight",)),
                Rule(mtp + "eh_proj.weight", (h + "eh_proj.weight",), shard=COLUMN),
                Rule(mtp + "final_layernorm.weight", (h + "shared_head.norm.weight",))]
