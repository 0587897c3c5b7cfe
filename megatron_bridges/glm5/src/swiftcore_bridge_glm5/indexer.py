"""GLM-5's DSA lightning indexer as megatron-core modules (megatron's experimental ``DSAIndexer``, adapted).

megatron-core 0.16.1 ships DeepSeek-V3.2's sparse attention (``experimental_attention_variant="dsa"``):
``DSAttention`` (top-k masked attention) around a ``DSAIndexer``. transformers' ``GlmMoeDsaIndexer`` computes
the same scores (``relu(q . k) * softmax_scale``, weighted per head by ``weights_proj(x) / sqrt(heads)``,
summed, causal, top-k) with three differences this module makes up for:

- the rotary slice is the *first* ``qk_rope_head_dim`` channels of each indexer head (megatron: the last);
- no Hadamard rotation of q and k (megatron's needs bf16 and ``fast_hadamard_transform``; the rotation is
  orthogonal, so it only matters for FP8 scoring);
- ``k_norm`` is a LayerNorm with eps 1e-6 (megatron builds it with the model's ``layernorm_epsilon``).

The indexer's linears are replicated on every TP rank (megatron's ``parallel_mode="duplicated"``): it reads
the whole hidden state and the gathered, normalised query latent, so every rank selects the same keys.
"""

from __future__ import annotations

from typing import Any

import torch
from megatron.core.transformer.experimental_attention_variant.dsa import DSAIndexer

__all__ = ["DuplicatedLinear", "GlmIndexer", "GlmIndexerKNorm", "LatentRMSNorm"]


class DuplicatedLinear(torch.nn.Linear):
    """A bias-free linear replicated on every TP rank, returning ``(output, None)`` as megatron's linears do."""

    def __init__(self, input_size: int, output_size: int, *, config: Any, bias: bool = False, **_: Any) -> None:
        super().__init__(input_size, output_size, bias=bias, dtype=config.params_dtype)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        """``(x @ W^T, None)``."""
        return super().forward(x), None


class LatentRMSNorm(torch.nn.Module):
    """transformers' ``q_a_layernorm`` / ``kv_a_layernorm``: RMSNorm with eps 1e-6 whatever ``rms_norm_eps`` says
    (GLM-5's is 1e-5; megatron builds MLA's latent norms with the model's ``layernorm_epsilon``)."""

    def __init__(self, config: Any, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = 1e-6
        self.weight = torch.nn.Parameter(torch.ones(hidden_size, dtype=config.params_dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``weight * x / rms(x)`` computed in float32, as transformers does."""
        xf = x.float()
        return self.weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


class GlmIndexerKNorm(torch.nn.LayerNorm):
    """transformers' ``indexer.k_norm``: ``nn.LayerNorm(index_head_dim, eps=1e-6)`` (weight and bias)."""

    def __init__(self, config: Any, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__(hidden_size, eps=1e-6, dtype=config.params_dtype)


class GlmIndexer(DSAIndexer):
    """megatron's ``DSAIndexer`` scoring as transformers' ``GlmMoeDsaIndexer`` does (module docstring)."""

    def _apply_rope(self, x: torch.Tensor, rotary_pos_emb: torch.Tensor, mscale: float) -> torch.Tensor:
        """Rotate the leading ``qk_rope_head_dim`` channels (interleaved pairs, as megatron's MLA rope)."""
        from megatron.core.models.common.embeddings import apply_rotary_pos_emb

        rot, rest = torch.split(x, [self.qk_pos_emb_head_dim, self.index_head_dim - self.qk_pos_emb_head_dim], -1)
        rot = apply_rotary_pos_emb(rot, rotary_pos_emb, config=self.config, cu_seqlens=None, mscale=mscale,
                                   cp_group=self.pg_collection.cp)
        return torch.cat([rot, rest], dim=-1)

    def forward_with_scores(self, x: torch.Tensor, qr: torch.Tensor, mask: torch.Tensor | None = None,
                            packed_seq_params: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Index scores ``[batch, sq, sk]`` and the top-k key indices ``[batch, sq, topk]`` (no Hadamard)."""
        from megatron.core.tensor_parallel.mappings import gather_from_sequence_parallel_region

        if packed_seq_params is not None:
            raise NotImplementedError("packed sequences are not supported by the GLM-5 DSA indexer")
        seq_len = self.rotary_pos_emb.get_rotary_seq_len(None, None, x, self.config, packed_seq_params)
        if self.config.rope_type == "rope":
            rotary_pos_emb, mscale = self.rotary_pos_emb(seq_len, packed_seq=False), 1.0
        else:
            rotary_pos_emb, mscale = self.rotary_pos_emb(seq_len, packed_seq=False)
        if self.config.sequence_parallel and self.pg_collection.tp.size() > 1:
            x = gather_from_sequence_parallel_region(x, group=self.pg_collection.tp)
            qr = gather_from_sequence_parallel_region(qr, group=self.pg_collection.tp)
        seq, batch, _ = x.size()
        q, _ = self.linear_wq_b(qr)
        q = self._apply_rope(q.reshape(seq, batch, self.index_n_heads, self.index_head_dim), rotary_pos_emb, mscale)
        k, _ = self.linear_wk(x)
        k = self._apply_rope(self.k_norm(k).reshape(seq, batch, 1, self.index_head_dim), rotary_pos_emb, mscale)
        weights, _ = self.linear_weights_proj(x)
        weights = weights.float() * (self.index_n_heads**-0.5) * self.softmax_scale
        scores = self._compute_index_scores(q, weights, k.reshape(seq, batch, self.index_head_dim))
        if mask is not None:
            scores = scores + mask
        return scores, scores.topk(min(self.index_topk, seq), dim=-1)[1]
