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
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

__all__ = ["PACKED_SDPA", "packed_sdpa_attention", "use_packed_attention"]

#: The attention implementation name this module registers.
PACKED_SDPA = "swiftcore_packed_sdpa"
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

    cu = kwargs.get("cu_seq_lens_q")
    position_ids = kwargs.get("position_ids")
    if cu is None and position_ids is not None and position_ids.dim() == 2 and position_ids.shape[0] == 1:
        from swiftcore_data.packed_layers import packed_cu_seq_lens

        cu = packed_cu_seq_lens(position_ids)  # samples restart at 0 (TRL's padding-free batches carry no cu_seq_lens)
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    per_sample = (
        cu is not None
        and query.shape[0] == 1
        and causal
        and all(kwargs.get(name) is None for name in _HANDED_ON)
        and query.shape[2] == key.shape[2] == int(cu[-1])  # no KV cache: the row is the whole context
    )
    if not per_sample:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    window = kwargs.get("sliding_window")
    gqa = query.shape[1] != key.shape[1]
    dropout_p = dropout if module.training else 0.0
    bounds = [int(b) for b in cu.tolist()]
    outputs = []
    for start, end in pairwise(bounds):
        q, k, v = query[:, :, start:end], key[:, :, start:end], value[:, :, start:end]
        mask, causal_flag = None, True
        if window is not None and end - start > window:  # a sliding-window layer on a sample longer than it
            idx = torch.arange(end - start, device=query.device)
            distance = idx[:, None] - idx[None, :]
            mask, causal_flag = (distance >= 0) & (distance < window), False
        outputs.append(
            torch.nn.functional.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=causal_flag, scale=scaling, enable_gqa=gqa
            )
        )
    out = torch.cat(outputs, dim=2) if len(outputs) > 1 else outputs[0]
    return out.transpose(1, 2).contiguous(), None


def _register() -> None:
    """Register :data:`PACKED_SDPA` with transformers (idempotent), its masks built as sdpa's are (used only by
    the batches handed on to sdpa)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(PACKED_SDPA, packed_sdpa_attention)
    AttentionMaskInterface.register(PACKED_SDPA, sdpa_mask)


def use_packed_attention(model: Any) -> bool:
    """Switch ``model`` from transformers' sdpa to :data:`PACKED_SDPA` for packed training; return whether it
    did. A model on another implementation (flash-attention, eager, a sequence-parallel one) is left as it is."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    _register()
    model.set_attn_implementation(PACKED_SDPA)
    return True
