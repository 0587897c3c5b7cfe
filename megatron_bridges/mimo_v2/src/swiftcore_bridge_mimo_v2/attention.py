"""MiMo-V2-Flash self-attention as a megatron-core module (local linear layers).

Why a module of its own: megatron-core 0.16.1's ``SelfAttention`` cannot express this attention
(transformers 5.19 ``MiMoV2FlashAttention``):

- q/k heads have ``head_dim`` channels but v heads ``v_head_dim`` (192 vs 128 in the release); the
  local ``DotProductAttention`` and ``linear_qkv`` sizing assume one ``kv_channels`` for both;
- sliding-window layers have twice the kv heads of the full layers (``num_query_groups`` is one
  number per model), their own rope theta (one ``rotary_base`` per model) and attention sinks;
  megatron's ``softmax_type="learnable"`` would give the full layers sinks too;
- the values are multiplied by ``attention_value_scale`` (kept as a constant here, not folded into
  the weights, so the checkpoint round trip stays bit-exact).

It is computed as transformers' eager path (MiMo has no SDPA path): scores in float32 with the
sink logit appended per head, max-subtracted softmax, the sink column dropped. Rotary is partial
(the first ``int(head_dim * partial_rotary_factor)`` channels, ``rotate_half`` layout). Heads are
split over tensor-parallel ranks by whole query groups, as megatron-core does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear
from megatron.core.tensor_parallel.layers import set_tensor_model_parallel_attributes
from megatron.core.transformer.module import MegatronModule
from megatron.core.utils import divide, get_tensor_model_parallel_group_if_none

__all__ = ["MimoAttention", "MimoLayerFacts"]


@dataclass(frozen=True)
class MimoLayerFacts:
    """What differs between MiMo's attention layers.

    Attributes:
        num_kv_heads: key/value heads (query groups) of this layer.
        head_dim: query/key channels per head.
        v_head_dim: value channels per head.
        rotary_dim: leading channels of each q/k head that rotate.
        rope_theta: this layer type's rotary base.
        sliding_window: the window (a query sees itself and ``window - 1`` tokens before), or None.
        sinks: whether the layer has a learnable sink logit per head (``softmax_offset``).
        value_scale: the constant the values are multiplied by.
    """

    num_kv_heads: int
    head_dim: int
    v_head_dim: int
    rotary_dim: int
    rope_theta: float
    sliding_window: int | None
    sinks: bool
    value_scale: float


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, dim: int) -> torch.Tensor:
    """HF ``apply_rotary_pos_emb`` with partial rotary: rotate the first ``dim`` channels, keep the rest."""
    rot, rest = x[..., :dim], x[..., dim:]
    half = dim // 2
    rotated = torch.cat((-rot[..., half:], rot[..., :half]), dim=-1)
    return torch.cat((rot * cos + rotated * sin, rest), dim=-1)


class MimoAttention(MegatronModule):
    """One MiMo-V2-Flash attention layer (see the module docstring).

    Weights: ``linear_qkv`` (per query group ``[q heads; k; v]``, v with ``v_head_dim`` rows per
    head), ``linear_proj``, and on sliding layers ``softmax_offset`` (one sink logit per head).

    Args:
        config: the megatron TransformerConfig (hidden size, heads, init methods).
        submodules: unused (megatron's spec passes one).
        facts: this layer's :class:`MimoLayerFacts`.
        layer_number: 1-based layer index (megatron passes it).
        pg_collection: megatron's process groups (default: the global ones).
        **kwargs: other arguments megatron's layer passes (``cp_comm_type``), ignored.
    """

    def __init__(self, config: Any, submodules: Any = None, *, facts: MimoLayerFacts, layer_number: int = 1,
                 pg_collection: Any = None, **kwargs: Any) -> None:
        super().__init__(config=config)
        self.facts = facts
        self.layer_number = layer_number
        tp_group = get_tensor_model_parallel_group_if_none(getattr(pg_collection, "tp", None))
        tp = tp_group.size() if tp_group is not None else 1
        heads, groups, d, dv = config.num_attention_heads, facts.num_kv_heads, facts.head_dim, facts.v_head_dim
        self.heads, self.groups = divide(heads, tp), divide(groups, tp)
        self.linear_qkv = ColumnParallelLinear(
            config.hidden_size, heads * d + groups * (d + dv), config=config, init_method=config.init_method,
            gather_output=False, bias=False, skip_bias_add=True, is_expert=False, tp_comm_buffer_name="qkv",
            tp_group=tp_group,
        )
        self.linear_proj = RowParallelLinear(
            heads * dv, config.hidden_size, config=config, init_method=config.output_layer_init_method, bias=False,
            input_is_parallel=True, skip_bias_add=True, is_expert=False, tp_comm_buffer_name="proj",
            tp_group=tp_group,
        )
        if facts.sinks:
            # Named as megatron's learnable-softmax parameter; split by heads like the query rows.
            self.softmax_offset = torch.nn.Parameter(torch.zeros(self.heads, dtype=config.params_dtype))
            set_tensor_model_parallel_attributes(self.softmax_offset, True, 0, 1)
        inv_freq = 1.0 / (facts.rope_theta ** (torch.arange(0, facts.rotary_dim, 2, dtype=torch.float)
                                                / facts.rotary_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def _cos_sin(self, seq: int, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """``[seq, 1, 1, rotary_dim]`` tables for positions ``0..seq-1`` (HF's rotary, float32 then cast)."""
        freqs = torch.arange(seq, device=device, dtype=torch.float)[:, None] * self.inv_freq.to(device)[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)[:, None, None, :]
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
                **kwargs: Any) -> tuple[torch.Tensor, None]:
        """Attend over ``[seq, batch, hidden]``; return ``(output, None)`` as megatron's attention does.

        Args:
            hidden_states: the normalised layer input.
            attention_mask: megatron's optional bool mask ``[batch, 1, seq, seq]``, True = masked out,
                applied on top of the causal (and sliding-window) mask.
            **kwargs: rotary tables, inference context and packed-sequence parameters megatron passes;
                this module computes its own rotary and refuses caches and packed sequences.

        Raises:
            ValueError: with an inference cache or packed sequences (not supported yet).
        """
        if kwargs.get("inference_context") is not None or kwargs.get("packed_seq_params") is not None:
            raise ValueError("MimoAttention does not support inference caches or packed sequences yet")
        f = self.facts
        s, b = hidden_states.shape[0], hidden_states.shape[1]
        per_group = self.heads // self.groups
        mixed, _ = self.linear_qkv(hidden_states)
        mixed = mixed.view(s, b, self.groups, -1)
        query, key, value = torch.split(mixed, [per_group * f.head_dim, f.head_dim, f.v_head_dim], dim=-1)
        query = query.reshape(s, b, self.heads, f.head_dim)
        value = value * f.value_scale
        cos, sin = self._cos_sin(s, hidden_states.device, hidden_states.dtype)
        query, key = _rotate(query, cos, sin, f.rotary_dim), _rotate(key, cos, sin, f.rotary_dim)

        q = query.permute(1, 2, 0, 3)  # [b, heads, s, d]
        k = key.permute(1, 2, 0, 3).repeat_interleave(per_group, dim=1)  # head j reads group j // per_group
        v = value.permute(1, 2, 0, 3).repeat_interleave(per_group, dim=1)
        scores = torch.matmul(q, k.transpose(2, 3)) * f.head_dim ** -0.5
        pos = torch.arange(s, device=q.device)
        allowed = pos[None, :] <= pos[:, None]
        if f.sliding_window is not None:
            allowed &= (pos[:, None] - pos[None, :]) < f.sliding_window
        if attention_mask is not None:
            allowed = allowed & ~attention_mask
        scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
        if f.sinks:
            sink = self.softmax_offset.to(scores.dtype).reshape(1, -1, 1, 1).expand(b, -1, s, 1)
            scores = torch.cat([scores, sink], dim=-1)
        scores = scores - scores.max(dim=-1, keepdim=True).values
        probs = torch.softmax(scores, dim=-1, dtype=scores.dtype)
        if f.sinks:
            probs = probs[..., :-1]
        context = torch.matmul(probs.to(v.dtype), v)  # [b, heads, s, dv]
        output, _ = self.linear_proj(context.permute(2, 0, 1, 3).reshape(s, b, -1))
        return output, None
