"""DeepSeek-V4 attention as megatron-core modules: sliding window, compressed sparse, heavily compressed.

What every layer computes (transformers 5.19 ``DeepseekV4Attention``, stateless prefill):

- queries through a low-rank bottleneck (``linear_q_down_proj`` -> ``q_layernorm`` ->
  ``linear_q_up_proj``), each head RMS-normalised without weight; one shared key=value head
  (``linear_kv`` -> ``kv_layernorm``); rotary on the trailing ``qk_rope_head_dim`` channels;
- eager softmax attention over the last ``sliding_window`` tokens plus a learned per-head sink
  logit (``sinks``) that takes probability mass but contributes no value;
- the output rotated back by the query's position, then the grouped low-rank output projection
  (``linear_o_down_proj``, one block per head group, then ``linear_proj``).

Layers with a compressor (:class:`Compressor`) also attend to compressed entries, each a softmax-gated
pool of a window of ``compress_rate`` tokens: heavily compressed attention (HCA) sees every entry
whose window has closed; compressed sparse attention (CSA) pools overlapping windows and its lightning
indexer (:class:`Indexer`) keeps only the ``index_topk`` best-scoring closed entries per query.

Every linear is a megatron ``ColumnParallelLinear``/``RowParallelLinear`` at tensor-parallel size 1
(the bridge refuses ``--tp`` > 1: V4's single shared KV head and the indexer are not split yet).
megatron-core's own DSA attention (``experimental_attention_variant/dsa.py``) is DeepSeek-V3.2's
per-token indexer, not V4's windowed compressor, so it is not used.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear
from megatron.core.transformer.module import MegatronModule
from swiftcore_megatron import BridgeError

from swiftcore_bridge_deepseek_v4.config import CSA, HCA, SLIDING
from swiftcore_bridge_deepseek_v4.inputs import UsesForwardInputs
from swiftcore_bridge_deepseek_v4.norms import RMSNorm, unweighted_rms_norm
from swiftcore_bridge_deepseek_v4.rope import apply_rotary, cos_sin, inverse_frequencies

__all__ = ["Compressor", "DeepseekV4Attention", "GroupedLinear", "Indexer"]


def _linear(config: Any, in_features: int, out_features: int, *, row: bool = False) -> Any:
    """A bias-free megatron local linear (TP 1) returning ``(output, None)``."""
    if row:
        return RowParallelLinear(in_features, out_features, config=config, init_method=config.output_layer_init_method,
                                 bias=False, input_is_parallel=True, skip_bias_add=True)
    return ColumnParallelLinear(in_features, out_features, config=config, init_method=config.init_method,
                                bias=False, gather_output=False, skip_bias_add=True)


class GroupedLinear(MegatronModule):
    """Block-diagonal linear: each of ``groups`` input blocks has its own ``[out, in]`` block of ``weight``.

    ``weight`` is ``[groups * out_per_group, in_per_group]`` as HF's ``o_a_proj`` stores it.
    """

    def __init__(self, config: Any, in_per_group: int, out_per_group: int, groups: int) -> None:
        super().__init__(config=config)
        self.groups = groups
        self.weight = torch.nn.Parameter(torch.empty(groups * out_per_group, in_per_group, dtype=config.params_dtype))
        config.init_method(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [..., groups, in]`` -> ``[..., groups, out]``."""
        shape = x.shape[:-2]
        width = x.shape[-1]
        w = self.weight.view(self.groups, -1, width).transpose(1, 2)
        y = torch.bmm(x.reshape(-1, self.groups, width).transpose(0, 1), w).transpose(0, 1)
        return y.reshape(*shape, self.groups, -1)


class Compressor(MegatronModule):
    """Pools each closed window of ``rate`` tokens into one entry: ``norm(sum softmax(gate + bias) * kv)``.

    With ``overlap`` (compressed sparse attention and its indexer) the projections are twice as wide:
    entry ``w`` pools the first half of window ``w - 1`` with the second half of window ``w``
    (``2 * rate`` slots; window 0's first half has zero weight). Entries are rotated at their window's
    first position with the compressor rotary base. An incomplete last window is not pooled.

    Args:
        config: the :class:`~swiftcore_bridge_deepseek_v4.config.DeepseekV4TransformerConfig`.
        head_dim: width of an entry.
        rate: tokens per window.
        overlap: pool overlapping windows (two series per token).
    """

    def __init__(self, config: Any, head_dim: int, rate: int, overlap: bool) -> None:
        super().__init__(config=config)
        self.head_dim, self.rate, self.overlap = head_dim, rate, overlap
        width = 2 * head_dim if overlap else head_dim
        self.linear_kv = _linear(config, config.hidden_size, width)
        self.linear_gate = _linear(config, config.hidden_size, width)
        self.position_bias = torch.nn.Parameter(torch.zeros(rate, width, dtype=config.params_dtype))
        self.kv_layernorm = RMSNorm(config, head_dim, eps=config.layernorm_epsilon)
        self.register_buffer(
            "inv_freq", inverse_frequencies(config.compress_rope_theta, config.qk_rope_head_dim), persistent=False
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [b, s, hidden]`` -> compressed entries ``[b, s // rate, head_dim]``."""
        batch = x.shape[0]
        kv, _ = self.linear_kv(x)
        gate, _ = self.linear_gate(x)
        usable = (kv.shape[1] // self.rate) * self.rate
        if usable == 0:
            return kv.new_zeros((batch, 0, self.head_dim))
        windows, r, d = usable // self.rate, self.rate, self.head_dim
        kv = kv[:, :usable].view(batch, windows, r, -1)
        gate = gate[:, :usable].view(batch, windows, r, -1) + self.position_bias
        if self.overlap:
            pooled_kv = kv.new_zeros((batch, windows, 2 * r, d))
            pooled_gate = gate.new_full((batch, windows, 2 * r, d), float("-inf"))
            pooled_kv[:, :, r:] = kv[..., d:]
            pooled_gate[:, :, r:] = gate[..., d:]
            if windows > 1:
                pooled_kv[:, 1:, :r] = kv[:, :-1, :, :d]
                pooled_gate[:, 1:, :r] = gate[:, :-1, :, :d]
            kv, gate = pooled_kv, pooled_gate
        compressed = self.kv_layernorm((kv * gate.softmax(dim=2, dtype=torch.float32).to(kv.dtype)).sum(dim=2))
        positions = (torch.arange(windows, device=x.device) * self.rate).unsqueeze(0).expand(batch, -1)
        cos, sin = cos_sin(positions, self.inv_freq, compressed.dtype)
        return apply_rotary(compressed.unsqueeze(1), cos, sin).squeeze(1)


def closed_entries(positions: torch.Tensor, rate: int, entries: int) -> torch.Tensor:
    """``[b, s, entries]`` True where the query at that position may see the entry (its window has closed)."""
    threshold = (positions + 1) // rate
    return torch.arange(entries, device=positions.device).view(1, 1, -1) < threshold.unsqueeze(-1)


class Indexer(MegatronModule):
    """The lightning indexer of compressed sparse attention: which compressed entries each query keeps.

    Score of entry ``t`` for a query: ``sum_h w_h * relu(q_h . k_t) / sqrt(index_head_dim)`` over
    ``index_n_heads`` heads, with ``q`` from the query bottleneck (``linear_q_up_proj``), ``k`` from its
    own overlapping :class:`Compressor`, and ``w = linear_weights_proj(x) / sqrt(index_n_heads)``. The
    top ``index_topk`` closed entries are kept.
    """

    def __init__(self, config: Any, rate: int) -> None:
        super().__init__(config=config)
        self.heads, self.head_dim, self.topk, self.rate = (
            config.index_n_heads, config.index_head_dim, config.index_topk, rate)
        self.compressor = Compressor(config, config.index_head_dim, rate, overlap=True)
        self.linear_q_up_proj = _linear(config, config.q_lora_rank, self.heads * self.head_dim)
        self.linear_weights_proj = _linear(config, config.hidden_size, self.heads)
        self.register_buffer(
            "inv_freq", inverse_frequencies(config.compress_rope_theta, config.qk_rope_head_dim), persistent=False
        )

    def forward(self, x: torch.Tensor, q_residual: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Indices ``[b, s, k]`` of the kept entries; ``-1`` where fewer than ``k`` entries are closed."""
        batch, seq, _ = x.shape
        keys = self.compressor(x)  # [b, T, d]
        cos, sin = cos_sin(positions, self.inv_freq, x.dtype)
        q, _ = self.linear_q_up_proj(q_residual)
        q = apply_rotary(q.view(batch, seq, -1, self.head_dim).transpose(1, 2), cos, sin).transpose(1, 2)
        scores = torch.matmul(q.float(), keys.transpose(-1, -2).float().unsqueeze(1))  # [b, s, heads, T]
        scores = F.relu(scores) * self.head_dim**-0.5
        weights, _ = self.linear_weights_proj(x)
        weights = weights.float() * self.heads**-0.5
        index_scores = (scores * weights.unsqueeze(-1)).sum(dim=2)  # [b, s, T]
        entries = keys.shape[1]
        k = min(self.topk, entries)
        if entries == 0:
            return index_scores.topk(k, dim=-1).indices
        visible = closed_entries(positions, self.rate, entries)
        top = index_scores.masked_fill(~visible, float("-inf")).topk(k, dim=-1).indices
        # Picks beyond the closed entries (early queries) are marked invalid.
        return torch.where(top >= ((positions + 1) // self.rate).unsqueeze(-1), torch.full_like(top, -1), top)


class DeepseekV4Attention(MegatronModule, UsesForwardInputs):
    """One DeepSeek-V4 attention block (see the module docstring); input and output ``[s, b, hidden]``.

    Args:
        config: the :class:`~swiftcore_bridge_deepseek_v4.config.DeepseekV4TransformerConfig`.
        layer_number: 1-based layer index (megatron's convention).
        attention_type: ``sliding_attention``, ``compressed_sparse_attention`` or ``heavily_compressed_attention``.
        pg_collection: accepted for megatron's layer builder; tensor parallelism is 1.
    """

    def __init__(self, config: Any, layer_number: int, attention_type: str, pg_collection: Any = None,
                 **_: Any) -> None:
        super().__init__(config=config)
        if attention_type not in (SLIDING, CSA, HCA):
            raise BridgeError(f"layer {layer_number}: unknown DeepSeek-V4 attention type {attention_type!r}")
        self.layer_number, self.attention_type = layer_number, attention_type
        heads, d = config.num_attention_heads, config.kv_channels
        self.heads, self.head_dim, self.window = heads, d, config.sliding_window
        self.o_groups, self.eps = config.o_groups, config.layernorm_epsilon
        self.linear_q_down_proj = _linear(config, config.hidden_size, config.q_lora_rank)
        self.q_layernorm = RMSNorm(config, config.q_lora_rank, eps=config.layernorm_epsilon)
        self.linear_q_up_proj = _linear(config, config.q_lora_rank, heads * d)
        self.linear_kv = _linear(config, config.hidden_size, d)
        self.kv_layernorm = RMSNorm(config, d, eps=config.layernorm_epsilon)
        self.linear_o_down_proj = GroupedLinear(config, heads * d // config.o_groups, config.o_lora_rank,
                                                config.o_groups)
        self.linear_proj = _linear(config, config.o_groups * config.o_lora_rank, config.hidden_size, row=True)
        self.sinks = torch.nn.Parameter(torch.zeros(heads, dtype=config.params_dtype))
        self.compressor = self.indexer = None
        if attention_type != SLIDING:
            self.rate = int(config.compress_rates[attention_type])
            self.compressor = Compressor(config, d, self.rate, overlap=attention_type == CSA)
            if attention_type == CSA:
                self.indexer = Indexer(config, self.rate)
        # Sliding-window layers rotate with the main base; layers with a compressor with the compressor's.
        base = config.rope_theta if attention_type == SLIDING else config.compress_rope_theta
        self.register_buffer("inv_freq", inverse_frequencies(base, config.qk_rope_head_dim), persistent=False)

    def _window_mask(self, batch: int, seq: int, attention_mask: torch.Tensor | None,
                     like: torch.Tensor) -> torch.Tensor:
        """Additive ``[b, 1, s, s]`` mask: causal, last ``sliding_window`` keys (and megatron's mask, True = masked)."""
        q = torch.arange(seq, device=like.device).view(-1, 1)
        k = torch.arange(seq, device=like.device).view(1, -1)
        blocked = (k > q) | (k <= q - self.window)
        blocked = blocked.view(1, 1, seq, seq).expand(batch, 1, seq, seq)
        if attention_mask is not None:
            blocked = blocked | attention_mask.bool()
        return torch.zeros(blocked.shape, dtype=like.dtype, device=like.device).masked_fill(
            blocked, torch.finfo(like.dtype).min)

    def _compressed(self, x: torch.Tensor, q_residual: torch.Tensor,
                    positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Compressed entries ``[b, 1, T, d]`` and their additive mask ``[b, 1, s, T]``."""
        batch, seq, _ = x.shape
        entries = self.compressor(x)
        count = entries.shape[1]
        if self.indexer is None:  # HCA: every closed entry
            visible = closed_entries(positions, self.rate, count)
            bias = entries.new_zeros((batch, seq, count)).masked_fill(~visible, float("-inf"))
        else:  # CSA: the indexer's picks
            picks = self.indexer(x, q_residual, positions)
            safe = torch.where(picks >= 0, picks, torch.full_like(picks, count))
            bias = entries.new_full((batch, seq, count + 1), float("-inf")).scatter(-1, safe, 0.0)[..., :count]
        return entries.unsqueeze(1), bias.unsqueeze(1)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
                **_: Any) -> tuple[torch.Tensor, None]:
        """``[s, b, hidden]`` -> ``([s, b, hidden], None)`` (megatron's ``(output, bias)`` convention)."""
        x = hidden_states.transpose(0, 1)  # [b, s, hidden]: the layout the compressor windows run over
        batch, seq, _ = x.shape
        positions = self.forward_inputs.positions(batch, seq, x.device)
        cos, sin = cos_sin(positions, self.inv_freq, x.dtype)

        q_residual = self.q_layernorm(self.linear_q_down_proj(x)[0])
        q = self.linear_q_up_proj(q_residual)[0].view(batch, seq, -1, self.head_dim).transpose(1, 2)
        q = apply_rotary(unweighted_rms_norm(q, self.eps), cos, sin)  # [b, heads, s, d]
        kv = self.kv_layernorm(self.linear_kv(x)[0]).view(batch, seq, 1, self.head_dim).transpose(1, 2)
        kv = apply_rotary(kv, cos, sin)  # [b, 1, s, d]: one head, used as key and as value

        mask = self._window_mask(batch, seq, attention_mask, x)
        if self.compressor is not None:
            entries, bias = self._compressed(x, q_residual, positions)
            kv = torch.cat([kv, entries], dim=2)
            mask = torch.cat([mask, bias.to(mask.dtype)], dim=-1)

        keys = kv.expand(batch, self.heads, kv.shape[2], self.head_dim)
        logits = torch.matmul(q, keys.transpose(2, 3)) * self.head_dim**-0.5 + mask
        sinks = self.sinks.reshape(1, -1, 1, 1).expand(batch, -1, seq, -1)
        logits = torch.cat([logits, sinks], dim=-1)
        logits = logits - logits.max(dim=-1, keepdim=True).values
        probs = F.softmax(logits, dim=-1, dtype=logits.dtype)[..., :-1]  # the sink takes mass, gives nothing
        out = torch.matmul(probs.to(keys.dtype), keys)  # [b, heads, s, d]

        # Keys are values, so values carry rotary: rotate the output back by the query's position.
        out = apply_rotary(out, cos, -sin).transpose(1, 2)  # [b, s, heads, d]
        grouped = self.linear_o_down_proj(out.reshape(batch, seq, self.o_groups, -1)).flatten(2)
        output, _ = self.linear_proj(grouped)
        return output.transpose(0, 1).contiguous(), None
