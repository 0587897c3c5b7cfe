"""Exact padding-free (packed) training for Qwen3.5's gated DeltaNet (linear-attention) layers.

Why: a packed batch is one row holding several samples, with ``position_ids`` restarting at 0 for
each (see ``swiftcore_data.PaddingFreeCollator``). transformers turns that into a block-diagonal mask
for the softmax-attention layers, but Qwen3.5's linear-attention layers have no mask: their causal
conv and their delta-rule recurrence run over the whole row, so every sample after the first sees
the previous samples' tokens. transformers 5.19 hands ``cu_seq_lens_q`` to the flash-linear-attention
kernel, which would restart the recurrence, but not to the causal conv, and its PyTorch fallbacks
(used without ``flash-linear-attention`` / ``causal_conv1d``, e.g. on CPU) ignore it altogether.

What: :func:`patch_packed_linear_attention` wraps each gated DeltaNet layer's ``forward``. When the
layer gets a packed row (``cu_seq_lens_q`` in its kwargs, no cache, no padding mask), the row is cut
at the sample boundaries; on a CPU each sample runs through the original forward alone, elsewhere they
are re-laid as a right-padded batch, run through it once, and the padding is dropped again. Right
padding is exact for a causal layer: no real token ever sees a padding token, and each sample starts
from a zero conv window and a zero state, as when it runs alone. The text model also gets a forward
pre-hook that derives ``cu_seq_lens_*`` from ``position_ids`` restarts when the caller sent only
``position_ids`` (as transformers' ``DataCollatorWithFlattening`` does by default), the same rule
transformers uses to build the block-diagonal attention mask.

When it can be removed: once transformers' gated DeltaNet restarts both the conv and the recurrence
at ``cu_seq_lens_q`` boundaries in its PyTorch fallbacks as well as in its kernels (checked against
5.19; :data:`TRANSFORMERS_RANGE` is where this module applies its patch; outside it, it logs why it
did nothing, and ``tests/test_packing_exact.py`` says whether the model is exact without it).
"""

from __future__ import annotations

import logging
from typing import Any

from swiftcore_data import (
    PACKING_KWARGS,
    PATCHED_MARK,
    PackedBatchError,
    packed_cu_seq_lens,
    packed_segments,
    wrap_forward,
)
from swiftcore_data import transformers_in_range as _transformers_in

__all__ = [
    "PACKING_KWARGS",
    "TRANSFORMERS_RANGE",
    "PackedBatchError",
    "packed_cu_seq_lens",
    "patch_packed_linear_attention",
    "transformers_in_range",
]

logger = logging.getLogger("swiftcore.plugins.qwen3_5")

#: Device types where a packed row's samples run through the layer one by one (elsewhere: one padded batch).
SAMPLE_BY_SAMPLE_DEVICES = ("cpu",)
#: transformers versions whose gated DeltaNet this patch was checked against (and needs it).
TRANSFORMERS_RANGE = ">=5.19,<6"


def _text_position_ids(position_ids: Any) -> Any | None:
    """The text positions Qwen3.5's text model builds its masks from (None for 3-row mRoPE ids)."""
    if position_ids is None:
        return None
    if position_ids.ndim == 2:
        return position_ids
    if position_ids.ndim == 3 and position_ids.shape[0] == 4:
        return position_ids[0]
    return None


def _boundaries_pre_hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """Add ``cu_seq_lens_*`` derived from ``position_ids`` to a packed call that has none.

    Same conditions as transformers' packed-mask detection: position ids given, no padding mask,
    no cache (and ``use_cache`` off, since the text model would create one).
    """
    if "cu_seq_lens_q" in kwargs or kwargs.get("attention_mask") is not None:
        return args, kwargs
    if kwargs.get("past_key_values") is not None or kwargs.get("use_cache"):
        return args, kwargs
    positions = _text_position_ids(kwargs.get("position_ids"))
    cu = packed_cu_seq_lens(positions) if positions is not None else None
    if cu is None:
        return args, kwargs
    longest = int((cu[1:] - cu[:-1]).max())
    kwargs = {**kwargs, "cu_seq_lens_q": cu, "cu_seq_lens_k": cu, "max_length_q": longest, "max_length_k": longest}
    return args, kwargs


def _packed_forward(
    self: Any,
    hidden_states: Any,
    cache_params: Any = None,
    attention_mask: Any = None,
    **kwargs: Any,
) -> Any:
    """A gated DeltaNet forward that restarts the conv and the recurrence at every packed sample."""
    import torch

    unpacked = self._swiftcore_unpacked_forward
    cu = kwargs.get("cu_seq_lens_q")
    if cu is None or cache_params is not None or attention_mask is not None:
        return unpacked(hidden_states, cache_params=cache_params, attention_mask=attention_mask, **kwargs)
    rest = {key: value for key, value in kwargs.items() if key not in PACKING_KWARGS}
    batch, seq_len, hidden = hidden_states.shape
    try:
        segments = packed_segments(None, cu, batch, seq_len)
    except PackedBatchError as err:
        raise PackedBatchError(f"{type(self).__name__} (layer {self.layer_idx}): {err}") from None
    if segments is None:  # one sample per row: nothing is packed
        return unpacked(hidden_states, **rest)
    if hidden_states.device.type in SAMPLE_BY_SAMPLE_DEVICES:
        # On a CPU each sample alone is faster than the padded batch below: the PyTorch delta rule's work grows
        # with the tokens it is given, padding included (one packed step of 8 samples of 64-1024 tokens: 1.6x,
        # bench/packed_attention.py). On an accelerator one batched call is kept (not measured here).
        flat = hidden_states.reshape(1, batch * seq_len, hidden)
        parts = [unpacked(flat[:, start:end], **rest) for _, start, end in segments]
        return torch.cat(parts, dim=1).reshape(batch, seq_len, -1)
    lengths = torch.tensor([end - start for _, start, end in segments], device=hidden_states.device)
    # Re-lay the flattened samples as a right-padded batch [n_samples, longest, hidden]; `keep` marks real
    # tokens, which come out of the boolean indexing in their packed order.
    longest = int(lengths.max())
    keep = torch.arange(longest, device=lengths.device)[None, :] < lengths[:, None]
    padded = hidden_states.new_zeros(len(lengths), longest, hidden)
    padded[keep] = hidden_states.reshape(batch * seq_len, hidden)
    out = unpacked(padded, **rest)
    return out[keep].reshape(batch, seq_len, -1)


def _gated_deltanet_classes() -> tuple[type, ...]:
    """The gated DeltaNet layer classes of transformers' Qwen3.5 families."""
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5GatedDeltaNet
    from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeGatedDeltaNet

    return Qwen3_5GatedDeltaNet, Qwen3_5MoeGatedDeltaNet


def _text_model_classes() -> tuple[type, ...]:
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5TextModel
    from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeTextModel

    return Qwen3_5TextModel, Qwen3_5MoeTextModel


def transformers_in_range() -> bool:
    """Whether the installed transformers is one :data:`TRANSFORMERS_RANGE` covers."""
    return _transformers_in(TRANSFORMERS_RANGE)


def patch_packed_linear_attention(model: Any) -> int:
    """Make ``model``'s gated DeltaNet layers exact on packed batches (see the module docstring).

    Patches the instances (not the classes), so models loaded elsewhere are untouched. Calling it
    again on the same model does nothing.

    Args:
        model: a loaded Qwen3.5 / Qwen3.5-MoE model (any class holding their text model).

    Returns:
        How many layers were patched (0 when transformers is outside :data:`TRANSFORMERS_RANGE`,
        or the model has no gated DeltaNet layer, or it was patched before).
    """
    if not transformers_in_range():
        import transformers

        logger.warning(
            "transformers %s is outside %s: Qwen3.5's linear-attention layers were not patched for packed "
            "batches; check tests/test_packing_exact.py before training padding-free",
            transformers.__version__,
            TRANSFORMERS_RANGE,
        )
        return 0
    layers = _gated_deltanet_classes()
    texts = _text_model_classes()
    patched = 0
    for module in model.modules():
        if isinstance(module, layers):
            patched += wrap_forward(module, _packed_forward)
        elif isinstance(module, texts) and not getattr(module, PATCHED_MARK, False):
            module.register_forward_pre_hook(_boundaries_pre_hook, with_kwargs=True)
            setattr(module, PATCHED_MARK, True)
    if patched:
        logger.debug("patched %d gated DeltaNet layers for packed batches", patched)
    return patched
