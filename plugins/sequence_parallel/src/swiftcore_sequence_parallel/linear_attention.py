"""Gated DeltaNet (Qwen3.5's linear attention) with the sequence split over the SP group.

Why: a gated DeltaNet layer is not attention. It mixes the sequence twice, through a causal depthwise
convolution over the last ``K`` tokens and through a recurrence whose state ``S [H, Dk, Dv]`` carries
everything before a token. Split the sequence over ranks and the shard of rank ``r`` needs both from
rank ``r - 1``: the last ``K - 1`` convolution inputs (a halo) and the recurrent state at the end of its
shard. Neither fits transformers' attention interface, so the layer's ``forward`` is replaced on the
loaded instances (:func:`enable_linear_attention`); its weights and its delta-rule kernel
(``torch_chunk_gated_delta_rule``, a hub kernel when transformers finds one) stay transformers'.

How:

* Convolution: every rank sends its last ``K - 1`` inputs to the next shard's rank and receives the
  previous shard's (:func:`~swiftcore_sequence_parallel.comm.chain_shift`, all ranks at once); the
  convolution then runs over ``[halo, shard]``.
* Recurrence: rank 0 runs the delta rule over its shard and sends its final state to rank 1, which
  starts from it, and so on down the chain (:class:`_DeltaRuleAcrossShards`). The backward runs the
  chain the other way: the gradient of each shard's initial state goes back to the previous rank, where
  it joins the gradient of that rank's final state. The forward is sequential over the ranks (rank
  ``r`` waits for ``r - 1``): the price of an exact recurrence; the softmax-attention layers around it
  stay parallel. The backward recomputes the local delta rule (as activation checkpointing would),
  so no rank keeps the kernel's intermediate chunks.
* Packed rows (samples restarting at position 0, no padding mask): the state and the halo restart at
  every sample, as Qwen3.5's plugin does on one process, and carry over a shard border only when the
  first token of the shard continues the previous shard's last sample (its position follows on by one).
  Padded rows (with a padding mask) are one sequence each, as on one process.

The layout (which rows continue, where the packed samples start) is the same for every layer, so a
forward pre-hook on the text model computes it once per forward (:func:`linear_layout`) and hands it to
the layers in their keyword arguments (:data:`LAYOUT_KWARG`), the way transformers passes
``cu_seq_lens_q``.
"""

from __future__ import annotations

import itertools
import sys
import types
from dataclasses import dataclass
from typing import Any

import torch

from swiftcore_sequence_parallel.comm import chain_neighbours, chain_shift, exchange

__all__ = [
    "LAYOUT_KWARG",
    "LinearLayout",
    "enable_linear_attention",
    "gated_deltanet_forward",
    "is_gated_deltanet",
    "linear_layout",
]

#: Keyword argument carrying the :class:`LinearLayout` from the text model to its layers.
LAYOUT_KWARG = "sp_linear_layout"
#: Set on an instance whose forward was replaced (so a second call leaves it alone).
_PATCHED = "_swiftcore_sp_linear_patched"
#: Attributes of transformers' gated DeltaNet layers (Qwen3.5, Qwen3.5-MoE) this forward uses.
_GDN_ATTRIBUTES = (
    "in_proj_qkv",
    "in_proj_z",
    "in_proj_a",
    "in_proj_b",
    "conv1d",
    "A_log",
    "dt_bias",
    "norm",
    "out_proj",
    "num_k_heads",
    "num_v_heads",
    "head_k_dim",
    "head_v_dim",
    "key_dim",
    "value_dim",
    "activation",
)


def is_gated_deltanet(module: Any) -> bool:
    """Whether ``module`` is a gated DeltaNet layer this module can split (transformers' Qwen3.5 layout)."""
    if "GatedDeltaNet" not in type(module).__name__ or not all(hasattr(module, a) for a in _GDN_ATTRIBUTES):
        return False
    return hasattr(sys.modules.get(type(module).__module__), "torch_chunk_gated_delta_rule")


@dataclass(frozen=True)
class LinearLayout:
    """Where this rank's shard sits in the sequences, for the gated DeltaNet layers.

    Attributes:
        continues: BoolTensor ``[B]``: row ``b`` of this shard continues the previous shard's last sample.
        segments: LongTensor ``[B, s]``: the sample index of each token inside the shard, from 0 (the
            first sample, which is the continued one when ``continues``).
        bounds: per row, the ``(start, end)`` token ranges of its samples, in order.
        prev / next: global ranks holding the previous / next shard (None at the ends of the sequence).
    """

    continues: torch.Tensor
    segments: torch.Tensor
    bounds: tuple[tuple[tuple[int, int], ...], ...]
    prev: int | None
    next: int | None

    @property
    def packed(self) -> bool:
        """Whether some row holds more than one sample."""
        return any(len(row) > 1 for row in self.bounds)


def _text_positions(position_ids: Any, batch: int, seq: int, device: Any) -> torch.Tensor:
    if position_ids is None:
        return torch.arange(seq, device=device).expand(batch, -1)
    if position_ids.ndim == 3:  # mRoPE ids [3 or 4, B, s]: for text every row carries the same positions
        position_ids = position_ids[0]
    return position_ids.expand(batch, -1)


def linear_layout(
    position_ids: Any, attention_mask: Any, batch: int, seq: int, sp_rank: int, sp_size: int
) -> LinearLayout:
    """The :class:`LinearLayout` of this rank's shard. Collective over the SP group (a neighbour exchange).

    Args:
        position_ids: the shard's global position ids (``[B or 1, s]``, or mRoPE ``[3 or 4, B, s]``).
        attention_mask: the shard's 2-D padding mask, or None. With one, every row is one sequence
            (packed samples are recognised only without a padding mask, as on one process).
        batch, seq: the shard's ``[B, s]``.
    """
    prev, nxt = chain_neighbours(sp_rank, sp_size)
    device = attention_mask.device if attention_mask is not None else None
    pos = _text_positions(position_ids, batch, seq, device).long()
    # The previous shard's last position of every row, to tell whether our first token follows on from it.
    last = exchange(pos[:, -1].contiguous(), nxt, pos[:, -1].contiguous(), prev)
    if attention_mask is not None:
        starts = torch.zeros(batch, seq, dtype=torch.bool, device=pos.device)
        continues = torch.full((batch,), last is not None, dtype=torch.bool, device=pos.device)
    else:
        starts = torch.ones(batch, seq, dtype=torch.bool, device=pos.device)
        starts[:, 1:] = pos[:, 1:] != pos[:, :-1] + 1
        first = torch.zeros(batch, dtype=torch.bool, device=pos.device)
        continues = (pos[:, 0] == last + 1) if last is not None else first
    starts[:, 0] = False  # token 0 opens segment 0 either way; `continues` says whether it is a new sample
    segments = starts.long().cumsum(dim=1)
    bounds = []
    for row in starts.tolist():
        cuts = [0] + [t for t, s in enumerate(row) if s] + [seq]
        bounds.append(tuple(itertools.pairwise(cuts)))
    return LinearLayout(continues=continues, segments=segments, bounds=tuple(bounds), prev=prev, next=nxt)


def _causal_conv(x: torch.Tensor, weight: torch.Tensor, bias: Any, layout: LinearLayout) -> torch.Tensor:
    """Depthwise causal convolution of ``x [B, C, s]`` over samples that may start in the previous shard."""
    kernel = weight.shape[-1]
    seq = x.shape[-1]
    if seq < kernel - 1:
        raise ValueError(
            f"sequence-parallel gated DeltaNet: each shard needs at least {kernel - 1} tokens (the convolution's "
            f"reach), this one has {seq}; use a smaller --sequence-parallel-size or longer sequences"
        )
    segments = layout.segments
    # What the next shard needs: our last K-1 inputs, where they belong to our last sample.
    tail_is_last = (segments[:, -(kernel - 1) :] == segments[:, -1:]).to(x.dtype)
    halo = chain_shift(x[:, :, -(kernel - 1) :] * tail_is_last[:, None, :], layout.prev, layout.next)
    # Segment ids over [halo, shard]: the halo belongs to sample 0 when the row continues, to none otherwise.
    halo_segment = torch.where(layout.continues, 0, -1).to(segments)[:, None].expand(-1, kernel - 1)
    extended = torch.cat([halo_segment, segments], dim=1)
    # Each token sums its K-window, but only over inputs of its own sample.
    same = extended.unfold(1, kernel, 1) == segments[:, :, None]  # [B, s, K]
    windows = torch.cat([halo, x], dim=2).unfold(2, kernel, 1)  # [B, C, s, K]
    taps = weight.reshape(1, -1, 1, kernel) * same[:, None].to(x.dtype)
    out = (windows * taps).sum(-1)
    return out if bias is None else out + bias[None, :, None]


def _delta_rule_rows(
    rule: Any, q: Any, k: Any, v: Any, g: Any, beta: Any, initial: Any, layout: LinearLayout
) -> tuple[torch.Tensor, torch.Tensor]:
    """The delta rule over this shard's samples: ``(output [B, s, H, Dv], final state of each row's last sample)``.

    ``initial`` (``[B, H, Dk, Dv]`` or None) seeds each row's first sample where the row continues.
    """
    if initial is not None:
        initial = initial * layout.continues.to(initial.dtype)[:, None, None, None]
    common = {"output_final_state": True, "use_qk_l2norm_in_kernel": True}
    if not layout.packed:  # one sample per row: one call for the batch
        return rule(q, k, v, g=g, beta=beta, initial_state=initial, **common)
    outs, finals = [], []
    for row, spans in enumerate(layout.bounds):
        for j, (start, end) in enumerate(spans):
            seed = initial[row : row + 1] if initial is not None and j == 0 else None
            sl = (slice(row, row + 1), slice(start, end))
            out, final = rule(q[sl], k[sl], v[sl], g=g[sl], beta=beta[sl], initial_state=seed, **common)
            outs.append(out)
        finals.append(final)
    batch, seq = q.shape[:2]
    out = torch.cat(outs, dim=1).reshape(batch, seq, *outs[0].shape[2:])
    return out, torch.cat(finals)


class _DeltaRuleAcrossShards(torch.autograd.Function):
    """The delta rule over the whole split sequence: state passed down the chain of ranks, gradient back up."""

    @staticmethod
    def forward(ctx: Any, rule: Any, layout: LinearLayout, q: Any, k: Any, v: Any, g: Any, beta: Any) -> Any:
        batch, _, heads, dv = v.shape
        like = q.new_empty((batch, heads, q.shape[-1], dv), dtype=torch.float32)
        initial = exchange(None, None, like, layout.prev)  # wait for the previous shard's final state
        out, final = _delta_rule_rows(rule, q, k, v, g, beta, initial, layout)
        exchange(final.float(), layout.next, None, None)
        ctx.rule, ctx.layout, ctx.has_initial = rule, layout, initial is not None
        ctx.save_for_backward(q, k, v, g, beta, initial if initial is not None else like.new_empty(0))
        ctx.state_like = like
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: Any) -> Any:
        q, k, v, g, beta, initial = ctx.saved_tensors
        layout = ctx.layout
        grad_final = exchange(None, None, ctx.state_like, layout.next)  # from the next shard, once it is done
        needs = ctx.needs_input_grad[2:]
        inputs = [t.detach().requires_grad_(need) for t, need in zip((q, k, v, g, beta), needs)]
        seed = initial.detach().requires_grad_() if ctx.has_initial else None
        with torch.enable_grad():
            out, final = _delta_rule_rows(ctx.rule, *inputs, seed, layout)
            outputs, grads_in = [out], [grad_out]
            if grad_final is not None:
                outputs.append(final.float())
                grads_in.append(grad_final)
            wrt = [t for t in inputs if t.requires_grad] + ([seed] if seed is not None else [])
            grads = iter(torch.autograd.grad(outputs, wrt, grads_in, allow_unused=True))
        result = [next(grads) if t.requires_grad else None for t in inputs]
        if seed is not None:
            grad_seed = next(grads)
            exchange(torch.zeros_like(seed) if grad_seed is None else grad_seed, layout.prev, None, None)
        return (None, None, *result)


def gated_deltanet_forward(
    self: Any, hidden_states: Any, cache_params: Any = None, attention_mask: Any = None, **kwargs: Any
) -> Any:
    """A gated DeltaNet layer's forward on a sequence shard (training: no cache). Collective over the SP group.

    The same computation as transformers' ``Qwen3_5GatedDeltaNet.forward`` without a cache, with the
    convolution's halo and the recurrent state taken from the previous shard (see the module docstring).
    """
    import torch.nn.functional as F
    from transformers.activations import ACT2FN

    layout = kwargs.get(LAYOUT_KWARG)
    if cache_params is not None or layout is None:
        raise RuntimeError(
            "this gated DeltaNet layer runs sequence-parallel: call the text model with the sharded batch and "
            "use_cache=False (the text model's pre-hook provides the shard layout)"
        )
    if attention_mask is not None:  # zero the padding, as transformers does (apply_mask_to_padding_states)
        hidden_states = (hidden_states * attention_mask[:, :, None]).to(hidden_states.dtype)
    batch, seq, _ = hidden_states.shape
    mixed = self.in_proj_qkv(hidden_states).transpose(1, 2)
    z = self.in_proj_z(hidden_states).reshape(batch, seq, -1, self.head_v_dim)
    b = self.in_proj_b(hidden_states)
    a = self.in_proj_a(hidden_states)
    weight = self.conv1d.weight.squeeze(1).to(mixed.dtype)
    mixed = ACT2FN[self.activation](_causal_conv(mixed, weight, self.conv1d.bias, layout)).transpose(1, 2)
    query, key, value = torch.split(mixed, [self.key_dim, self.key_dim, self.value_dim], dim=-1)
    query = query.reshape(batch, seq, -1, self.head_k_dim)
    key = key.reshape(batch, seq, -1, self.head_k_dim)
    value = value.reshape(batch, seq, -1, self.head_v_dim)
    beta = b.sigmoid()
    g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias)
    if self.num_v_heads // self.num_k_heads > 1:
        query = query.repeat_interleave(self.num_v_heads // self.num_k_heads, dim=2)
        key = key.repeat_interleave(self.num_v_heads // self.num_k_heads, dim=2)
    rule = sys.modules[type(self).__module__].torch_chunk_gated_delta_rule
    core = _DeltaRuleAcrossShards.apply(rule, layout, query, key, value, g, beta)
    core = self.norm(core.reshape(-1, self.head_v_dim), z.reshape(-1, self.head_v_dim))
    return self.out_proj(core.reshape(batch, seq, -1))


def _layout_pre_hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """Text-model pre-hook: compute this forward's :class:`LinearLayout` once and pass it to every layer."""
    from swiftcore_sequence_parallel.groups import get_sequence_parallel_state

    state = get_sequence_parallel_state()
    ids = kwargs.get("input_ids", args[0] if args else None)
    embeds = kwargs.get("inputs_embeds")
    batch, seq = (ids if ids is not None else embeds).shape[:2]
    mask = kwargs.get("attention_mask")
    mask = mask if isinstance(mask, torch.Tensor) and mask.ndim == 2 else None
    layout = linear_layout(kwargs.get("position_ids"), mask, batch, seq, state.rank, state.size)
    return args, {**kwargs, LAYOUT_KWARG: layout}


def enable_linear_attention(model: Any) -> int:
    """Make ``model``'s gated DeltaNet layers run sequence-parallel; returns how many were switched.

    Patches the instances (the class and other models are untouched), and registers the layout pre-hook
    on each text model holding such layers. Calling it again does nothing.
    """
    switched = 0
    for module in model.modules():
        layers = getattr(module, "layers", None)
        if not isinstance(layers, torch.nn.ModuleList):
            continue
        mixers = [m for layer in layers for m in layer.children() if is_gated_deltanet(m)]
        if not mixers or getattr(module, _PATCHED, False):
            continue
        module.register_forward_pre_hook(_layout_pre_hook, with_kwargs=True)
        setattr(module, _PATCHED, True)
        for mixer in mixers:
            mixer.forward = types.MethodType(gated_deltanet_forward, mixer)
            switched += 1
    return switched
