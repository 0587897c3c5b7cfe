"""The megatron-core config of a DeepSeek-V4 model: ``TransformerConfig`` plus the fields V4's modules read.

megatron-core's ``TransformerConfig`` describes the standard parts (sizes, norms, MoE experts and
the SwiGLU clamp, which it calls ``activation_func_clamp_value``). What only V4 has, the modules of
this bridge's layer spec read from :class:`DeepseekV4TransformerConfig`; the bridge fills it from
config.json (:meth:`~swiftcore_bridge_deepseek_v4.bridge.DeepseekV4Bridge.transformer_config`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from megatron.core.transformer import TransformerConfig

__all__ = ["CSA", "HCA", "SLIDING", "DeepseekV4TransformerConfig"]

SLIDING = "sliding_attention"
CSA = "compressed_sparse_attention"
HCA = "heavily_compressed_attention"


@dataclass
class DeepseekV4TransformerConfig(TransformerConfig):
    """``TransformerConfig`` with DeepSeek-V4's own settings (names as in HF ``DeepseekV4Config``).

    Attributes:
        hc_mult: residual streams of the hyper-connections.
        hc_sinkhorn_iters: Sinkhorn-Knopp iterations making the stream-mixing matrix doubly stochastic.
        hc_eps: the hyper-connections' numerical floor.
        q_lora_rank: width of the query's low-rank bottleneck.
        o_groups: head groups of the grouped output projection.
        o_lora_rank: per-group width of the grouped output projection.
        index_n_heads: lightning-indexer query heads.
        index_head_dim: lightning-indexer head width.
        index_topk: compressed entries each query keeps (compressed sparse attention).
        sliding_window: keys each query sees in the uncompressed branch (itself included).
        attention_layer_types: per layer ``sliding_attention``, ``compressed_sparse_attention`` or
            ``heavily_compressed_attention``.
        mlp_layer_types: per layer ``hash_moe`` (experts picked by a token-id table) or ``moe``.
        compress_rates: tokens per compressed entry, by attention layer type.
        rope_theta: rotary base of sliding-window layers.
        compress_rope_theta: rotary base of layers with a compressor, of the compressor and the indexer.
        qk_rope_head_dim: trailing channels of each head that are rotated.
        router_score_function: ``sqrtsoftplus`` or ``sigmoid`` (megatron's own router knows neither
            the first nor a table-routed variant; :mod:`~swiftcore_bridge_deepseek_v4.moe` routes).
        hash_vocab_size: rows of the hash layers' token-id -> experts table.
    """

    hc_mult: int = 4
    hc_sinkhorn_iters: int = 20
    hc_eps: float = 1e-6
    q_lora_rank: int = 1024
    o_groups: int = 8
    o_lora_rank: int = 1024
    index_n_heads: int = 64
    index_head_dim: int = 128
    index_topk: int = 512
    sliding_window: int = 128
    attention_layer_types: tuple[str, ...] = ()
    mlp_layer_types: tuple[str, ...] = ()
    compress_rates: dict[str, int] = field(default_factory=dict)
    rope_theta: float = 10000.0
    compress_rope_theta: float = 160000.0
    qk_rope_head_dim: int = 64
    router_score_function: str = "sqrtsoftplus"
    hash_vocab_size: int = 0
