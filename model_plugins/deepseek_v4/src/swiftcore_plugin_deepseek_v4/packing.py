"""Exact padding-free (packed) training for DeepSeek-V4's compressed attention layers.

Why: a packed batch is one row holding several samples, with ``position_ids`` restarting at 0 for
each (see ``swiftcore_data.PaddingFreeCollator``). transformers 5.19 builds a block-diagonal
sliding-window mask for DeepSeek-V4's main attention from those ``position_ids``, but the layers with
a compressor (compressed sparse attention with its lightning indexer, and heavily compressed
attention) compress fixed windows of the whole row: windows straddle sample boundaries, window
positions count from the row's start while the causality check uses each sample's own positions, so
a sample attends to compressed blocks of the samples packed before it, and its block layout differs
from the one it has alone.

What: :func:`patch_packed_compressed_attention` wraps the ``forward`` of each attention layer that
has a compressor. On a packed row (no cache; boundaries from ``cu_seq_lens_q`` when the batch has
it, else from ``position_ids`` restarts, the rule transformers uses for the mask) the layer runs once
per sample, on that sample's slice of the hidden states, position ids, rotary tables and mask, exactly
as it runs when the sample is alone. Sliding-window-only layers are left alone (their mask is exact).
A split layer returns no attention weights (None).

When it can be removed: once transformers' DeepSeek-V4 compressors and indexer honour packed
sequence boundaries (checked against 5.19; :data:`TRANSFORMERS_RANGE` is where this module applies
its patch; outside it, it logs why it did nothing, and ``tests/test_packing_exact.py`` says whether
the model is exact without it).
"""

from __future__ import annotations

import logging
from typing import Any

from swiftcore_data import PACKING_KWARGS, PackedBatchError, packed_segments, row_slice, slice_rotary, wrap_forward
from swiftcore_data import transformers_in_range as _transformers_in

__all__ = [
    "TRANSFORMERS_RANGE",
    "PackedBatchError",
    "packed_segments",
    "patch_packed_compressed_attention",
    "transformers_in_range",
]

logger = logging.getLogger("swiftcore.plugins.deepseek_v4")

#: transformers versions whose DeepSeek-V4 attention this patch was checked against (and needs it).
TRANSFORMERS_RANGE = ">=5.19,<6"


def _packed_forward(
    self: Any,
    hidden_states: Any,
    position_embeddings: Any,
    position_ids: Any,
    attention_mask: Any,
    past_key_values: Any = None,
    **kwargs: Any,
) -> tuple[Any, Any]:
    """A compressed-attention forward that runs each packed sample on its own (see the module docstring)."""
    import torch

    unpacked = self._swiftcore_unpacked_forward
    call = (hidden_states, position_embeddings, position_ids, attention_mask, past_key_values)
    if past_key_values is not None:
        return unpacked(*call, **kwargs)
    batch, seq_len = hidden_states.shape[:2]
    segments = packed_segments(position_ids, kwargs.get("cu_seq_lens_q"), batch, seq_len)
    if segments is None:
        return unpacked(*call, **kwargs)
    rest = {key: value for key, value in kwargs.items() if key not in PACKING_KWARGS}
    outputs = []
    for row, start, end in segments:
        mask = attention_mask
        if isinstance(mask, torch.Tensor):
            mask = row_slice(mask, row, 0, None)[..., start:end, start:end]
        output, _ = unpacked(
            hidden_states[row : row + 1, start:end],
            slice_rotary(position_embeddings, row, start, end),
            None if position_ids is None else row_slice(position_ids, row, start, end),
            mask,
            None,
            **rest,
        )
        outputs.append(output)
    return torch.cat(outputs, dim=1).reshape(batch, seq_len, -1), None


def transformers_in_range() -> bool:
    """Whether the installed transformers is one :data:`TRANSFORMERS_RANGE` covers."""
    return _transformers_in(TRANSFORMERS_RANGE)


def patch_packed_compressed_attention(model: Any) -> int:
    """Make ``model``'s compressed attention layers exact on packed batches (see the module docstring).

    Patches the instances (not the class), so models loaded elsewhere are untouched. Calling it
    again on the same model does nothing.

    Args:
        model: a loaded DeepSeek-V4 model.

    Returns:
        How many layers were patched (0 when transformers is outside :data:`TRANSFORMERS_RANGE`,
        the model has no compressed attention layer, or it was patched before).
    """
    if not transformers_in_range():
        import transformers

        logger.warning(
            "transformers %s is outside %s: DeepSeek-V4's compressed attention was not patched for packed "
            "batches; check tests/test_packing_exact.py before training padding-free",
            transformers.__version__,
            TRANSFORMERS_RANGE,
        )
        return 0
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4Attention

    patched = 0
    for module in model.modules():
        if isinstance(module, DeepseekV4Attention) and module.compressor is not None:
            patched += wrap_forward(module, _packed_forward)
    if patched:
        logger.debug("patched %d compressed attention layers for packed batches", patched)
    return patched
