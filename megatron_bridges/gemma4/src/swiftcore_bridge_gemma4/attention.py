"""Gemma 4 self-attention as a megatron-core module (local linear layers from the spec).

What megatron-core's ``SelfAttention`` lacks for Gemma 4 (transformers 5.19 ``Gemma4TextAttention``),
all of which this module does:

- a weightless RMSNorm on the values (``v_norm``) besides the q/k norms, and softmax scale 1.0
  (the norms replace ``1/sqrt(head_dim)``);
- per layer type its own head size, kv-head count and rotary table: the sliding layers rotate
  every channel pair; the full layers use "proportional" rope, which rotates the first
  ``partial_rotary_factor`` of the frequencies over the *whole* head (pairs ``i, i + d/2``),
  not megatron's contiguous leading slice;
- sliding-window causal masks (a query sees itself and the ``window - 1`` tokens before it);
- ``attention_k_eq_v``: values are the raw key projection (``linear_qkv`` holds only q and k);
- KV sharing: a kv-shared layer has only a query projection (``linear_q``) and attends over the
  keys/values an earlier layer left in the per-forward :class:`Gemma4ForwardState`.

Everything is computed in megatron's ``[sequence, batch, ...]`` layout; heads are split over
tensor-parallel ranks by whole query groups, as megatron-core does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear
from megatron.core.transformer.module import MegatronModule
from megatron.core.transformer.spec_utils import build_module
from megatron.core.utils import divide, get_tensor_model_parallel_group_if_none

from swiftcore_bridge_gemma4.facts import LayerFacts, RopeFacts
from swiftcore_bridge_gemma4.norm import Gemma4RMSNorm

__all__ = [
    "Gemma4Attention",
    "Gemma4AttentionSubmodules",
    "Gemma4ForwardState",
    "apply_rotary",
    "attention_allowed",
    "rope_cos_sin",
    "rope_inv_freq",
]


@dataclass
class Gemma4ForwardState:
    """What one forward pass carries from layer to layer (megatron's block threads it as ``context``).

    Attributes:
        positions: token positions ``[batch, seq]`` (for the rotary tables).
        per_layer_inputs: the per-layer input embeddings ``[seq, batch, layers, size]``, or None.
        shared_kv: layer index -> its (normalised, rotated) keys and values, for kv-shared layers.
    """

    positions: torch.Tensor
    per_layer_inputs: torch.Tensor | None = None
    shared_kv: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)


def rope_inv_freq(rope: RopeFacts, head_dim: int) -> torch.Tensor:
    """The ``head_dim / 2`` inverse frequencies of HF's rope init for this layer type (float32).

    ``default``: ``theta^(-2i/d)`` for every pair. ``proportional``: the first
    ``int(partial_rotary_factor * d // 2)`` of those, then zeros (those pairs do not rotate),
    divided by ``factor``.
    """
    if rope.kind == "default":
        return 1.0 / (rope.theta ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim))
    angles = int(rope.partial_rotary_factor * head_dim // 2)
    rotated = 1.0 / (rope.theta ** (torch.arange(0, 2 * angles, 2, dtype=torch.int64).float() / head_dim))
    inv_freq = torch.cat([rotated, torch.zeros(head_dim // 2 - angles, dtype=torch.float32)])
    return inv_freq / rope.factor


def rope_cos_sin(rope: RopeFacts, head_dim: int, positions: torch.Tensor,
                 dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos, sin`` of shape ``[seq, batch, 1, head_dim]`` for ``positions`` ``[batch, seq]``."""
    inv_freq = rope_inv_freq(rope, head_dim).to(positions.device)
    freqs = positions[..., None].float() * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1).transpose(0, 1).unsqueeze(2)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``x * cos + rotate_half(x) * sin`` over the whole head (HF's ``apply_rotary_pos_emb``)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def attention_allowed(seq: int, window: int | None, device: torch.device) -> torch.Tensor:
    """``[seq, seq]`` bool: query q may attend key k (causal; within ``window`` tokens when given)."""
    q = torch.arange(seq, device=device)[:, None]
    k = torch.arange(seq, device=device)[None, :]
    allowed = k <= q
    if window is not None:
        allowed &= (q - k) < window
    return allowed


@dataclass
class Gemma4AttentionSubmodules:
    """The linear and norm classes the attention builds (local, non-Transformer-Engine ones by default)."""

    linear_qkv: type = ColumnParallelLinear
    linear_proj: type = RowParallelLinear
    q_layernorm: type = Gemma4RMSNorm
    k_layernorm: type = Gemma4RMSNorm


class Gemma4Attention(MegatronModule):
    """One Gemma 4 attention layer (see the module docstring).

    Weights: ``linear_qkv`` (per query group ``[q heads; k; v]``, or ``[q heads; k]`` with k-eq-v),
    or ``linear_q`` on a kv-shared layer; ``q_layernorm``, ``k_layernorm`` (not on kv-shared layers);
    ``linear_proj``.

    Args:
        config: the megatron TransformerConfig (hidden size, heads, norm epsilon, init methods).
        submodules: the classes to build.
        facts: this layer's :class:`~swiftcore_bridge_gemma4.facts.LayerFacts`.
        tp_group: the tensor-parallel group (default: megatron's).
    """

    def __init__(self, config: Any, submodules: Gemma4AttentionSubmodules, facts: LayerFacts,
                 tp_group: Any = None) -> None:
        super().__init__(config=config)
        self.facts = facts
        tp_group = get_tensor_model_parallel_group_if_none(tp_group)
        tp = tp_group.size() if tp_group is not None else 1
        d, heads, groups = facts.head_dim, config.num_attention_heads, facts.num_kv_heads
        self.heads = divide(heads, tp)
        self.groups = divide(groups, tp)
        if facts.kv_shared:
            out, name = heads * d, "linear_q"
        else:
            out, name = (heads + groups * (1 if facts.k_eq_v else 2)) * d, "linear_qkv"
        linear_in = build_module(
            submodules.linear_qkv, config.hidden_size, out, config=config, init_method=config.init_method,
            gather_output=False, bias=False, skip_bias_add=True, is_expert=False, tp_comm_buffer_name="qkv",
            tp_group=tp_group,
        )
        setattr(self, name, linear_in)
        self.q_layernorm = build_module(submodules.q_layernorm, config=config, hidden_size=d,
                                        eps=config.layernorm_epsilon)
        if not facts.kv_shared:
            self.k_layernorm = build_module(submodules.k_layernorm, config=config, hidden_size=d,
                                            eps=config.layernorm_epsilon)
            self.v_norm = Gemma4RMSNorm(config, d, eps=config.layernorm_epsilon, with_scale=False)
        self.linear_proj = build_module(
            submodules.linear_proj, heads * d, config.hidden_size, config=config,
            init_method=config.output_layer_init_method, bias=False, input_is_parallel=True, skip_bias_add=True,
            is_expert=False, tp_comm_buffer_name="proj", tp_group=tp_group,
        )

    def _own_kv(self, hidden_states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Queries, keys and values from this layer's own ``linear_qkv``."""
        s, b, d = hidden_states.shape[0], hidden_states.shape[1], self.facts.head_dim
        per_group = self.heads // self.groups
        mixed, _ = self.linear_qkv(hidden_states)
        mixed = mixed.view(s, b, self.groups, -1)
        if self.facts.k_eq_v:
            query, key = torch.split(mixed, [per_group * d, d], dim=-1)
            value = key  # the raw key projection, before the key's norm and rotary
        else:
            query, key, value = torch.split(mixed, [per_group * d, d, d], dim=-1)
        key = apply_rotary(self.k_layernorm(key), cos, sin)
        value = self.v_norm(value)
        return query.reshape(s, b, self.heads, d), key, value

    def forward(self, hidden_states: torch.Tensor, state: Gemma4ForwardState,
                attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Attend; ``hidden_states`` is ``[seq, batch, hidden]``, so is the result.

        Args:
            hidden_states: the normalised layer input.
            state: the per-forward state (positions, shared keys/values).
            attention_mask: megatron's optional bool mask ``[batch, 1, seq, seq]``, True = masked out,
                applied on top of the causal (and sliding-window) mask.
        """
        s, b, d = hidden_states.shape[0], hidden_states.shape[1], self.facts.head_dim
        cos, sin = rope_cos_sin(self.facts.rope, d, state.positions, hidden_states.dtype)
        if self.facts.kv_shared:
            query, _ = self.linear_q(hidden_states)
            query = query.view(s, b, self.heads, d)
            key, value = state.shared_kv[self.facts.kv_source]
        else:
            query, key, value = self._own_kv(hidden_states, cos, sin)
            if self.facts.stores_kv:
                state.shared_kv[self.facts.index] = (key, value)
        query = apply_rotary(self.q_layernorm(query), cos, sin)
        context = self._core_attention(query, key, value, attention_mask)
        output, _ = self.linear_proj(context)
        return output

    def _core_attention(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                        attention_mask: torch.Tensor | None) -> torch.Tensor:
        """Scaled-dot-product attention with scale 1.0; ``[s, b, heads * d]`` out.

        Dispatched as transformers' default ("sdpa") attention dispatches: a plain causal call
        (grouped heads in the kernel) when no mask is needed, i.e. without a padding mask and on
        full layers or sequences shorter than the window; otherwise an explicit boolean mask over
        repeated kv heads. The same kernels then see the same inputs (measured: HF's own eager and
        SDPA paths differ by up to ~7e-6 in the logits of the tiny model; this matches SDPA).
        """
        s, b = query.shape[0], query.shape[1]
        q = query.permute(1, 2, 0, 3)  # [b, heads, s, d]
        k = key.permute(1, 2, 0, 3)
        v = value.permute(1, 2, 0, 3)
        window = self.facts.sliding_window
        if attention_mask is None and (window is None or s < window):
            context = torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=s > 1, scale=1.0, enable_gqa=self.heads != self.groups)
        else:
            repeat = self.heads // self.groups  # head j reads kv group j // repeat
            allowed = attention_allowed(s, window, q.device)
            if attention_mask is not None:
                allowed = allowed & ~attention_mask
            context = torch.nn.functional.scaled_dot_product_attention(
                q, k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1), attn_mask=allowed,
                scale=1.0)
        return context.permute(2, 0, 1, 3).reshape(s, b, -1)
