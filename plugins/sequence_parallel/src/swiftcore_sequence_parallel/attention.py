"""The attention functions transformers models call under sequence parallelism.

:func:`register` adds ``sp_ulysses``, ``sp_ring`` and ``sp_hybrid`` to transformers' ``AttentionInterface``
(and a matching entry to its ``AttentionMaskInterface``); :func:`enable_sequence_parallel` points a model's
``config._attn_implementation`` at the one for the active mode. All three run
:func:`sequence_parallel_attention`, which does, per layer:

1. Ulysses part (``ulysses_size > 1``): all-to-all from sequence shards to head shards.
2. Ring part (``ring_size > 1``): ring attention over the ring group; otherwise attention over the span
   with :func:`~swiftcore_sequence_parallel.kernels.low_memory_attention` (activation memory linear in the
   sequence; torch's sdpa only under attention dropout).
3. all-to-all back to sequence shards.

Masks: the model builds its masks on the local shard, which is wrong for a split sequence, so the mask
entry registered for these names hands the attention function the 2-D padding mask untouched; the
function gathers it and the position ids over the SP group and rebuilds the global mask (causal, sliding
window, padding, packed samples: :mod:`~swiftcore_sequence_parallel.masks`).
"""

from __future__ import annotations

import weakref
from typing import Any

from swiftcore_sequence_parallel import ATTENTION_NAMES

__all__ = ["enable_sequence_parallel", "register", "sequence_parallel_attention"]

_MODE_OF_NAME = {name: mode for mode, name in ATTENTION_NAMES.items()}

# The global layout is the same for every layer of one forward: gathered once per (position ids, padding
# mask) pair, kept while the local tensors it came from are alive. Weak references, so a later batch never
# hits a stale entry; a few entries, because full and sliding-window layers get different mask objects.
# Every rank runs the same program, so every rank hits or misses together (the gather is collective).
_layout_cache: list[tuple[Any, Any, tuple[Any, Any]]] = []
_CACHE_SIZE = 4


def _alive(ref: Any, obj: Any) -> bool:
    return (ref is None and obj is None) or (ref is not None and ref() is obj)


def _dead(entry: tuple[Any, Any, Any]) -> bool:
    return any(ref is not None and ref() is None for ref in entry[:2])


def global_layout(position_ids: Any, attention_mask: Any, group: Any, batch: int) -> tuple[Any, Any]:
    """``(segments [b, S], key_valid [B, S] or None)`` of the whole sequence, from this rank's shard.

    Collective over the SP group (every rank passes the same kinds of arguments: shard_batch makes sure).
    """
    from swiftcore_sequence_parallel.comm import all_gather_nograd
    from swiftcore_sequence_parallel.masks import segment_ids

    for pos_ref, mask_ref, layout in _layout_cache:
        if _alive(pos_ref, position_ids) and _alive(mask_ref, attention_mask):
            return layout
    if position_ids is None:
        raise RuntimeError(
            "sequence-parallel attention needs the global position_ids of the shard (model(..., position_ids=...));"
            " shard_batch provides them"
        )
    if attention_mask is not None and attention_mask.dim() != 2:
        raise RuntimeError(
            f"sequence-parallel attention expects a 2-D padding mask, got shape {tuple(attention_mask.shape)}: "
            "pass the collator's attention_mask, not a prepared 4-D mask"
        )
    pos = all_gather_nograd(position_ids.reshape(-1, position_ids.shape[-1]), group, dim=1)
    valid = None if attention_mask is None else all_gather_nograd(attention_mask.bool(), group, dim=1)
    if valid is not None and valid.shape[0] != batch:
        raise RuntimeError(f"padding mask batch {valid.shape[0]} does not match the query batch {batch}")
    layout = (segment_ids(pos), valid)
    _layout_cache[:] = [e for e in _layout_cache if not _dead(e)][-(_CACHE_SIZE - 1) :]
    _layout_cache.append(
        (weakref.ref(position_ids), None if attention_mask is None else weakref.ref(attention_mask), layout)
    )
    return layout


def sequence_parallel_attention(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: float | None = None,
    sliding_window: int | None = None,
    softcap: float | None = None,
    position_ids: Any = None,
    **kwargs: Any,
) -> tuple[Any, None]:
    """transformers attention function: ``query [B, H, s, D]``, ``key/value [B, Hkv, s, D]`` of the local shard.

    Returns ``(output [B, s, H, D], None)`` like transformers' sdpa function (no attention weights).
    """
    import torch

    from swiftcore_sequence_parallel.groups import get_sequence_parallel_state
    from swiftcore_sequence_parallel.kernels import KeyLayout, dense_attention, low_memory_attention
    from swiftcore_sequence_parallel.masks import allow_own_key_in_empty_rows, allowed_mask
    from swiftcore_sequence_parallel.ring import ring_attention
    from swiftcore_sequence_parallel.ulysses import heads_to_sequence, sequence_to_heads

    state = get_sequence_parallel_state()
    if kwargs.get("output_attentions"):
        raise ValueError("sequence-parallel attention does not return attention weights (output_attentions)")
    if sliding_window is None:
        sliding_window = getattr(module, "sliding_window", None)
    causal = bool(getattr(module, "is_causal", True))
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    segments, key_valid = global_layout(position_ids, attention_mask, state.group, query.shape[0])

    q, k, v = query, key, value
    if state.ulysses_size > 1:
        q, k, v = heads_to_sequence(q, k, v, state.ulysses_group, state.ulysses_size)
    if state.ring_size > 1:
        out = ring_attention(
            q,
            k,
            v,
            state=state,
            segments=segments,
            key_valid=key_valid,
            causal=causal,
            sliding_window=sliding_window,
            scale=scale,
            softcap=softcap,
            dropout=dropout,
        )
    elif not dropout:
        idx = torch.arange(q.shape[2], device=q.device)
        layout = KeyLayout(idx, idx, segments, key_valid, causal, sliding_window)
        out = low_memory_attention(q, k, v, layout, scale=scale, softcap=softcap)[0].to(q.dtype)
    else:  # attention dropout: torch's kernels draw the dropout mask (the low-memory kernel has none)
        idx = torch.arange(q.shape[2], device=q.device)
        mask = allowed_mask(idx, idx, segments, key_valid, causal=causal, sliding_window=sliding_window)
        mask = allow_own_key_in_empty_rows(mask, idx, idx)
        out = dense_attention(q, k, v, mask, scale=scale, softcap=softcap, dropout=dropout)
    if state.ulysses_size > 1:
        out = sequence_to_heads(out, state.ulysses_group)
    return out.transpose(1, 2).contiguous(), None


def _attention_for(name: str) -> Any:
    mode = _MODE_OF_NAME[name]

    def attention(*args: Any, **kwargs: Any) -> tuple[Any, None]:
        from swiftcore_sequence_parallel.groups import get_sequence_parallel_state

        active = get_sequence_parallel_state().mode
        if active != mode:
            raise RuntimeError(
                f"the model asks for {name!r} but sequence parallelism was initialised in {active!r} mode"
            )
        return sequence_parallel_attention(*args, **kwargs)

    attention.__name__ = f"{name}_attention_forward"
    attention.__doc__ = f"``{name}``: :func:`sequence_parallel_attention` in {mode} mode."
    return attention


def _padding_mask_only(
    batch_size: int,
    q_length: int,
    kv_length: int,
    q_offset: int = 0,
    kv_offset: int = 0,
    mask_function: Any = None,
    attention_mask: Any = None,
    **kwargs: Any,
) -> Any:
    """Mask entry for the SP names: the 2-D padding mask as given (or None); the attention builds the rest.

    Unlike flash attention's entry, an all-ones mask is not dropped: every rank must gather the same kind
    of object, and one rank's shard may have padding while another's has none.
    """
    del batch_size, q_length, q_offset, kv_offset, mask_function, kwargs
    return None if attention_mask is None else attention_mask[:, -kv_length:]


def register() -> None:
    """Register the SP attention and mask functions with transformers (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    for name in ATTENTION_NAMES.values():
        AttentionInterface.register(name, _attention_for(name))
        AttentionMaskInterface.register(name, _padding_mask_only)


def enable_sequence_parallel(model: Any, state: Any = None) -> Any:
    """Make ``model`` use the SP attention of ``state`` (default: the active one); returns the model.

    Gated DeltaNet layers (Qwen3.5) get their sequence-parallel forward
    (:func:`~swiftcore_sequence_parallel.linear_attention.enable_linear_attention`). Checks the head count
    against the Ulysses size first (ValueError naming both), and turns the KV
    cache off (``config.use_cache = False``): a split sequence cannot be decoded, and with a cache
    transformers also stops recognising packed samples from the position ids.
    """
    from swiftcore_sequence_parallel.groups import get_sequence_parallel_state
    from swiftcore_sequence_parallel.linear_attention import enable_linear_attention
    from swiftcore_sequence_parallel.ulysses import check_heads

    state = state if state is not None else get_sequence_parallel_state()
    config = getattr(model.config, "text_config", None) or model.config
    heads = getattr(config, "num_attention_heads", None)
    if heads is not None:
        check_heads(int(heads), state.ulysses_size)
    register()
    model.set_attn_implementation(ATTENTION_NAMES[state.mode])
    enable_linear_attention(model)
    for cfg in {id(model.config): model.config, id(config): config}.values():
        cfg.use_cache = False
    return model
