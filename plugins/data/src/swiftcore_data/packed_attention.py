"""Softmax attention over a packed row, one sample at a time: what flash-attention's varlen kernel does, on sdpa.

A packed (padding-free) row holds several samples. transformers' sdpa path keeps them apart with a
block-diagonal mask over the whole row, so a row of ``T`` tokens costs ``T x T`` scores in every layer, and a
materialised float mask of that size; padded batches cost ``rows x longest²``. On a machine without
flash-attention (every CPU) packing then loses to padding as soon as a row holds more than a few samples: figure 3
of bench/RESULTS.md measured it. Running torch's sdpa on each sample's span with ``is_causal=True`` costs
``sum(length²)``, never more than either, and needs no mask.

:func:`use_packed_attention` switches a loaded model to it (the name :data:`PACKED_SDPA`, registered with
transformers' ``AttentionInterface``). Batches without ``cu_seq_lens_q`` (padded ones, generation) and
layers it does not cover (logit soft-capping) go to transformers' own sdpa with the mask transformers built, so
the switch is safe for any batch. flash-attention is not hand-written here: it is what this replaces where it
cannot run, and a model that has it keeps it.

A model that runs eager attention (no sdpa: attention sinks, as MiMo-V2-Flash's, which sdpa has no argument for)
gets the same split under :data:`PACKED_EAGER`: each sample's span goes through the model's own eager function
(its ``eager_attention_forward``, sinks and all) with the causal (or sliding-window) mask that sample would have
alone, so the row costs ``sum(length²)`` scores instead of ``T x T`` and the math is the model's, not a copy.
"""

from __future__ import annotations

import logging
from itertools import pairwise
from typing import Any

__all__ = ["PACKED_EAGER", "PACKED_SDPA", "packed_eager_attention", "packed_sdpa_attention", "use_packed_attention"]

logger = logging.getLogger("swiftcore_data")

#: The attention implementation name this module registers for models on sdpa.
PACKED_SDPA = "swiftcore_packed_sdpa"
#: ... and for models on eager attention.
PACKED_EAGER = "swiftcore_packed_eager"
#: Attention arguments that change the scores beyond a causal mask (soft-capping, sinks, a position bias):
#: layers that pass one are handed to transformers' sdpa, which knows what to do with them.
_HANDED_ON = ("softcap", "s_aux", "sinks", "position_bias")


def packed_sdpa_attention(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[Any, None]:
    """transformers' attention-function signature: ``query`` ``[1, heads, T, dim]``, ``key`` / ``value``
    ``[1, kv_heads, T, dim]`` of one packed row whose samples ``cu_seq_lens_q`` (or, without it, restarts of
    ``position_ids``) mark; returns ``[1, T, heads, dim]``. Anything else is handed to transformers' sdpa
    unchanged."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    bounds = _sample_bounds(module, query, key, is_causal, kwargs)
    if bounds is None or any(kwargs.get(name) is not None for name in _HANDED_ON):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    window = kwargs.get("sliding_window")
    gqa = query.shape[1] != key.shape[1]
    dropout_p = dropout if module.training else 0.0
    outputs = []
    for start, end in pairwise(bounds):
        q, k, v = query[:, :, start:end], key[:, :, start:end], value[:, :, start:end]
        mask, causal_flag = None, True
        if window is not None and end - start > window:  # a sliding-window layer on a sample longer than it
            mask, causal_flag = _allowed(end - start, window, query.device), False
        outputs.append(
            torch.nn.functional.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=causal_flag, scale=scaling, enable_gqa=gqa
            )
        )
    out = torch.cat(outputs, dim=2) if len(outputs) > 1 else outputs[0]
    return out.transpose(1, 2).contiguous(), None


def packed_eager_attention(
    module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kwargs: Any
) -> tuple[Any, None]:
    """:func:`packed_sdpa_attention` for a model on eager attention: each sample's span of a packed row goes through
    the model's own ``eager_attention_forward`` with the mask it would have alone (causal, or the sliding window);
    returns ``[1, T, heads, dim]``. Anything else goes to that eager function unchanged."""
    import torch

    eager = _eager_function(module)
    bounds = _sample_bounds(module, query, key, kwargs.get("is_causal"), kwargs)
    if bounds is None:
        return eager(module, query, key, value, attention_mask, **kwargs)
    window = kwargs.get("sliding_window")
    lowest = torch.finfo(query.dtype).min
    outputs = []
    for start, end in pairwise(bounds):
        allowed = _allowed(end - start, window, query.device)
        mask = torch.zeros(allowed.shape, dtype=query.dtype, device=query.device).masked_fill(~allowed, lowest)
        q, k, v = query[:, :, start:end], key[:, :, start:end], value[:, :, start:end]
        outputs.append(eager(module, q, k, v, mask[None, None], **kwargs)[0])
    return (torch.cat(outputs, dim=1) if len(outputs) > 1 else outputs[0]), None


def _sample_bounds(
    module: Any, query: Any, key: Any, is_causal: bool | None, kwargs: dict[str, Any]
) -> list[int] | None:
    """The token offsets where a packed row's samples start (and the row ends), from ``cu_seq_lens_q`` or, without
    it, the restarts of ``position_ids``; None when the call is not one causal packed row without a KV cache."""
    cu = kwargs.get("cu_seq_lens_q")
    position_ids = kwargs.get("position_ids")
    if cu is None and position_ids is not None and position_ids.dim() == 2 and position_ids.shape[0] == 1:
        from swiftcore_data.packed_layers import packed_cu_seq_lens

        cu = packed_cu_seq_lens(position_ids)  # samples restart at 0 (TRL's padding-free batches carry no cu_seq_lens)
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    if (
        cu is None
        or query.shape[0] != 1
        or not causal
        or not query.shape[2] == key.shape[2] == int(cu[-1])  # no KV cache: the row is the whole context
    ):
        return None
    return [int(b) for b in cu.tolist()]


def _allowed(length: int, window: int | None, device: Any) -> Any:
    """``[length, length]`` bool: which keys each query of one sample may attend (causal, within ``window``)."""
    import torch

    idx = torch.arange(length, device=device)
    distance = idx[:, None] - idx[None, :]
    allowed = distance >= 0
    return allowed & (distance < window) if window is not None else allowed


def _eager_function(module: Any) -> Any:
    """The ``eager_attention_forward`` of the modeling file that defines ``module``'s class."""
    import sys

    return sys.modules[type(module).__module__].eager_attention_forward


def _register() -> None:
    """Register :data:`PACKED_SDPA` and :data:`PACKED_EAGER` with transformers (idempotent), their masks built as
    sdpa's and eager's are (used only by the calls handed on)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask, sdpa_mask

    AttentionInterface.register(PACKED_SDPA, packed_sdpa_attention)
    AttentionMaskInterface.register(PACKED_SDPA, sdpa_mask)
    AttentionInterface.register(PACKED_EAGER, packed_eager_attention)
    AttentionMaskInterface.register(PACKED_EAGER, eager_mask)


def use_packed_attention(model: Any) -> bool:
    """Switch ``model`` from transformers' sdpa to :data:`PACKED_SDPA`, or from eager attention to
    :data:`PACKED_EAGER`, for packed training; return whether it did. A model on another implementation
    (flash-attention, a sequence-parallel one), or on eager attention whose modeling file has no
    ``eager_attention_forward`` to call per sample, or one that its family's plugin marked with
    :func:`swiftcore_data.packed_layers.keep_attention_implementation`, is left as it is."""
    import sys

    from swiftcore_data.packed_layers import KEEP_ATTENTION

    config = getattr(model, "config", None)
    implementation = getattr(config, "_attn_implementation", None) if config is not None else None
    kept = getattr(model, KEEP_ATTENTION, None)
    if kept:
        logger.info("packed training keeps %s attention: %s", implementation, kept)
        return False
    if implementation == "sdpa":
        target = PACKED_SDPA
    elif implementation == "eager" and hasattr(sys.modules.get(type(model).__module__), "eager_attention_forward"):
        target = PACKED_EAGER
    else:
        return False
    _register()
    model.set_attn_implementation(target)
    return True
