"""DeepSeek-V3-style bridge: multi-latent attention (MLA) + sigmoid-routed MoE with shared experts.

Maps HF ``deepseek_v3`` checkpoints onto megatron-core's MLA layer spec (local modules). The first
``first_k_dense_replace`` layers keep a dense MLP. Routing: sigmoid scores plus the
``e_score_correction_bias`` (megatron's ``expert_bias``) choose experts through group-limited top-k;
the chosen scores are renormalised and scaled by ``routed_scaling_factor``.

Tensor parallelism follows megatron-core 0.16.1's local MLA spec (``get_gpt_layer_local_spec(
multi_latent_attention=True)``), where every MLA linear but ``linear_proj`` is a ``ColumnParallelLinear``:

- ``linear_q_down_proj`` / ``linear_kv_down_proj`` (``q_a_proj`` / ``kv_a_proj_with_mqa``): split on
  their output rows like any column-parallel linear; ``MLASelfAttention`` gathers the partial latents
  over the TP group before the latent norms, so a contiguous dim-0 split is exact. TP must divide
  ``q_lora_rank`` and ``kv_lora_rank + qk_rope_head_dim``. (Transformer Engine's spec instead keeps
  these two duplicated on every rank: this checkpoint layout is for the local spec.)
- ``linear_q_up_proj`` / ``linear_kv_up_proj`` (``q_b_proj`` / ``kv_b_proj``): rows are whole heads
  (``[nope; rope]`` per q head, ``[k_nope; v]`` per kv head, the same order in HF and megatron), so a
  dim-0 split gives each rank its own heads.
- ``linear_proj`` (``o_proj``): row-parallel, split on dim 1; the latent norms and the router (weight
  and expert bias) are replicated.
- Experts: megatron's expert tensor-parallel size defaults to the TP size (this bridge does not set
  it), so each routed expert's ``linear_fc1`` splits gate and up per rank and its ``linear_fc2`` splits
  on dim 1, as in the Qwen3-MoE bridge; ``--ep`` then places whole experts. The shared expert is an
  ordinary TP-split gated MLP.

Not yet: multi-token-prediction (MTP) layers and yarn rope scaling.
"""

from __future__ import annotations

from typing import Any

from swiftcore_megatron import COLUMN, ROW, BridgeError, Concat, ParallelismError, Rule

from swiftcore_bridge_gpt.gpt import GATE_UP, GPTMoEBridge

__all__ = ["DeepSeekV3Bridge", "sdpa_core_attention"]


def sdpa_core_attention() -> type:
    """A causal scaled-dot-product core attention accepting MLA's separate k/v head sizes.

    megatron-core's local ``DotProductAttention`` rejects ``k_channels != v_channels``, which MLA
    passes (q/k heads carry the rope part, v heads do not); Transformer Engine's attention accepts
    them but does not run on a CPU. Built lazily so importing this module does not import torch.
    """
    import torch.nn.functional as F
    from megatron.core.transformer.module import MegatronModule

    class SDPACoreAttention(MegatronModule):
        """Causal attention over ``[seq, batch, heads, dim]`` tensors with torch's SDPA."""

        def __init__(self, config: Any, layer_number: int, attn_mask_type: Any, attention_type: str,
                     attention_dropout: float | None = None, softmax_scale: float | None = None,
                     k_channels: int | None = None, v_channels: int | None = None, cp_comm_type: Any = None,
                     pg_collection: Any = None) -> None:
            super().__init__(config=config)
            self.softmax_scale = softmax_scale

        def forward(self, query: Any, key: Any, value: Any, attention_mask: Any, attn_mask_type: Any = None,
                    attention_bias: Any = None, packed_seq_params: Any = None) -> Any:
            if packed_seq_params is not None:
                raise BridgeError("packed sequences are not supported by the CPU SDPA core attention")
            q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))  # -> [batch, heads, seq, dim]
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.softmax_scale)
            seq, batch = query.shape[0], query.shape[1]
            return out.permute(2, 0, 1, 3).reshape(seq, batch, -1)

    return SDPACoreAttention


class DeepSeekV3Bridge(GPTMoEBridge):
    """DeepSeek-V3 (``deepseek_v3``): MLA attention, sigmoid group-top-k MoE with a shared expert."""

    model_types = ("deepseek_v3",)

    @property
    def qk_norm(self) -> bool:
        """MLA always has the q and kv latent norms."""
        return True

    def num_experts(self) -> int:
        """Routed experts per MoE layer."""
        return int(self.get("n_routed_experts"))

    def is_moe_layer(self, i: int) -> bool:
        """Layers from ``first_k_dense_replace`` on, every ``moe_layer_freq``-th, have experts."""
        first = int(self.get("first_k_dense_replace", default=0))
        freq = int(self.get("moe_layer_freq", default=1))
        return i >= first and i % freq == 0

    def _check_supported(self) -> None:
        if self.get("q_lora_rank", default=None) is None:
            raise BridgeError("config.json: q_lora_rank=null (no q compression) is not supported by this bridge yet")
        if not self.get("norm_topk_prob", default=True):
            raise BridgeError("config.json: norm_topk_prob=false does not match megatron's sigmoid router")
        if self.get("attention_bias", default=False):
            raise BridgeError("config.json: attention_bias=true is not supported by this bridge yet")

    def validate_parallelism(self, tp: int, ep: int) -> None:
        """TP must divide the heads and FFN widths (as for any MoE) and MLA's two latent projections.

        megatron's local MLA spec builds ``linear_q_down_proj`` and ``linear_kv_down_proj`` as
        column-parallel linears and gathers their outputs, so their output widths (``q_lora_rank`` and
        ``kv_lora_rank + qk_rope_head_dim``) are split over the TP ranks as well.

        Raises:
            ParallelismError: naming the dimension ``tp`` does not divide and the sizes that would.
        """
        super().validate_parallelism(tp, ep)  # also refuses configs _check_supported rejects (no q_lora_rank)
        latent = {
            "q_lora_rank": int(self.get("q_lora_rank")),
            "kv_lora_rank + qk_rope_head_dim": int(self.get("kv_lora_rank")) + int(self.get("qk_rope_head_dim")),
        }
        for name, size in latent.items():
            if size % tp:
                raise ParallelismError(
                    f"--tp {tp} does not divide config.json {name}={size} (megatron splits MLA's latent "
                    f"down-projections over the TP ranks); use a --tp that divides {size} and the heads"
                )

    def transformer_config(self, *, tp: int = 1, ep: int = 1, params_dtype: Any = None) -> Any:
        """``MLATransformerConfig`` matching the HF config (plain rope, sigmoid routing with expert bias)."""
        import torch
        import torch.nn.functional as F
        from megatron.core.transformer.transformer_config import MLATransformerConfig

        self._check_supported()
        kwargs = self._config_kwargs(tp=tp, ep=ep, params_dtype=params_dtype or torch.float32)
        for key in ("num_query_groups", "kv_channels", "add_qkv_bias"):
            kwargs.pop(key)
        experts_shared = int(self.get("n_shared_experts", default=0))
        kwargs.update(
            multi_latent_attention=True,
            q_lora_rank=int(self.get("q_lora_rank")),
            kv_lora_rank=int(self.get("kv_lora_rank")),
            qk_head_dim=int(self.get("qk_nope_head_dim")),
            qk_pos_emb_head_dim=int(self.get("qk_rope_head_dim")),
            v_head_dim=int(self.get("v_head_dim")),
            rope_type="rope",
            rotary_base=self.rope_theta(),
            # mcore scales the softmax by yarn's mscale whenever this exceeds 1; plain rope: 1.
            rotary_scaling_factor=1.0,
            moe_router_score_function="sigmoid",
            moe_router_enable_expert_bias=True,
            moe_router_topk_scaling_factor=float(self.get("routed_scaling_factor", default=1.0)),
            moe_router_num_groups=int(self.get("n_group", default=1)),
            moe_router_group_topk=int(self.get("topk_group", default=1)),
            moe_router_pre_softmax=False,
            moe_shared_expert_intermediate_size=experts_shared * int(self.get("moe_intermediate_size")) or None,
        )
        return MLATransformerConfig(**kwargs, activation_func=F.silu)

    def layer_spec(self, config: Any) -> Any:
        """The local MLA decoder block spec, with an SDPA core attention (see :func:`sdpa_core_attention`)."""
        spec = super().layer_spec(config)
        core_attention = sdpa_core_attention()
        for layer in spec.layer_specs:
            layer.submodules.self_attention.submodules.core_attention = core_attention
        return spec

    def model_kwargs(self) -> dict[str, Any]:
        """MLA applies rotary inside attention: the GPTModel itself gets no position embedding."""
        return {**super().model_kwargs(), "position_embedding_type": "none"}

    def _ffn_dims(self) -> dict[str, int]:
        return {"moe_intermediate_size": int(self.get("moe_intermediate_size")),
                "intermediate_size": int(self.get("intermediate_size"))}

    def attention_rules(self, i: int) -> list[Rule]:
        """Layer ``i``'s input norm and MLA projections with their latent norms."""
        m, h = f"decoder.layers.{i}.", f"{self.hf_prefix}layers.{i}."
        a, s = h + "self_attn.", m + "self_attention."
        return [
            Rule(m + "input_layernorm.weight", (h + "input_layernorm.weight",)),
            Rule(s + "linear_q_down_proj.weight", (a + "q_a_proj.weight",), shard=COLUMN),
            Rule(s + "q_layernorm.weight", (a + "q_a_layernorm.weight",)),
            Rule(s + "linear_q_up_proj.weight", (a + "q_b_proj.weight",), shard=COLUMN),
            Rule(s + "linear_kv_down_proj.weight", (a + "kv_a_proj_with_mqa.weight",), shard=COLUMN),
            Rule(s + "kv_layernorm.weight", (a + "kv_a_layernorm.weight",)),
            Rule(s + "linear_kv_up_proj.weight", (a + "kv_b_proj.weight",), shard=COLUMN),
            Rule(s + "linear_proj.weight", (a + "o_proj.weight",), shard=ROW),
        ]

    def moe_rules(self, i: int) -> list[Rule]:
        """The Qwen3-MoE rules plus the router's expert bias and the shared expert."""
        m, h = f"decoder.layers.{i}.", f"{self.hf_prefix}layers.{i}."
        rules = super().moe_rules(i)
        rules.insert(2, Rule(m + "mlp.router.expert_bias", (h + "mlp.gate.e_score_correction_bias",)))
        if int(self.get("n_shared_experts", default=0)):
            sh = h + "mlp.shared_experts."
            rules += [
                Rule(m + "mlp.shared_experts.linear_fc1.weight", (sh + "gate_proj.weight", sh + "up_proj.weight"),
                     Concat(2), GATE_UP),
                Rule(m + "mlp.shared_experts.linear_fc2.weight", (sh + "down_proj.weight",), shard=ROW),
            ]
        return rules
