"""Exact padding-free (packed) training for DeepSeek-V4's compressed attention layers.

Why: a packed batch is one row holding several samples, with ``position_ids`` restarting at 0 for
each (see ``swiftcore.data.PaddingFreeCollator``). transformers 5.19 builds a block-diagonal
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
import types
from itertools import pairwise
from typing import Any

from swiftcore.errors import SwiftcoreError

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
# Flash-attention varlen kwargs: meaningless for one sample's slice, so a split layer drops them.
_PACKING_KWARGS = ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")
_MARK = "_swiftcore_packing_patched"


class PackedBatchError(SwiftcoreError):
    """A packed batch's boundaries (``cu_seq_lens_q``) do not fit the tokens the layer got."""


def packed_segments(position_ids: Any, cu_seq_lens: Any, batch: int, seq_len: int) -> list[tuple[int, int, int]] | None:
    """The ``(row, start, end)`` token ranges of the samples packed in a ``[batch, seq_len]`` input.

    Args:
        position_ids: LongTensor ``[batch or 1, seq_len]``; a sample starts wherever they stop counting up by
            one (as in ``transformers.masking_utils.find_packed_sequence_indices``). Used when
            ``cu_seq_lens`` is None.
        cu_seq_lens: IntTensor ``[n + 1]`` of cumulative lengths over the flattened rows (flash-attention's
            varlen layout), or None.
        batch: rows in the input.
        seq_len: tokens per row.

    Returns:
        The ranges in order, or None when each row holds one sample.

    Raises:
        PackedBatchError: ``cu_seq_lens`` does not cover the input, or a sample spans two rows.
    """
    import torch

    if cu_seq_lens is not None:
        bounds = [int(b) for b in cu_seq_lens.tolist()]
        if bounds[0] != 0 or bounds[-1] != batch * seq_len or any(a >= b for a, b in pairwise(bounds)):
            raise PackedBatchError(
                f"cu_seq_lens_q={bounds} does not cover the {batch}x{seq_len} tokens of the batch; pass the "
                "cu_seq_lens_q that PaddingFreeCollator builds for it, or leave it out and send position_ids "
                "that restart at 0 for each sample"
            )
    elif position_ids is not None:
        positions = position_ids.expand(batch, -1).reshape(-1)
        starts = torch.ones_like(positions, dtype=torch.bool)
        starts[1:] = positions[1:] != positions[:-1] + 1
        bounds = [*torch.nonzero(starts).flatten().tolist(), batch * seq_len]
        bounds = sorted({*bounds, *range(0, batch * seq_len, seq_len)})  # every row starts a sample
    else:
        return None
    if bounds == list(range(0, batch * seq_len + 1, seq_len)):  # one sample per row: nothing is packed
        return None
    segments = []
    for start, end in pairwise(bounds):
        row = start // seq_len
        if (end - 1) // seq_len != row:
            raise PackedBatchError(
                f"cu_seq_lens_q={bounds}: the sample at tokens {start}..{end - 1} spans rows of {seq_len} tokens; "
                "pack each sample inside one row"
            )
        segments.append((row, start - row * seq_len, end - row * seq_len))
    return segments


def _rows(tensor: Any, row: int, start: int, end: int) -> Any:
    """``tensor[row, start:end]`` keeping the batch dim (a broadcast batch of 1 serves every row)."""
    row = row if tensor.shape[0] > 1 else 0
    return tensor[row : row + 1, start:end]


def _slice_rotary(position_embeddings: Any, row: int, start: int, end: int) -> Any:
    """One sample's slice of the rotary tables: a ``(cos, sin)`` pair or a ``{rope type: (cos, sin)}`` dict."""
    if isinstance(position_embeddings, dict):
        return {key: _slice_rotary(value, row, start, end) for key, value in position_embeddings.items()}
    cos, sin = position_embeddings
    return _rows(cos, row, start, end), _rows(sin, row, start, end)


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
    rest = {key: value for key, value in kwargs.items() if key not in _PACKING_KWARGS}
    outputs = []
    for row, start, end in segments:
        mask = attention_mask
        if isinstance(mask, torch.Tensor):
            mask = _rows(mask, row, 0, None)[..., start:end, start:end]
        output, _ = unpacked(
            hidden_states[row : row + 1, start:end],
            _slice_rotary(position_embeddings, row, start, end),
            None if position_ids is None else _rows(position_ids, row, start, end),
            mask,
            None,
            **rest,
        )
        outputs.append(output)
    return torch.cat(outputs, dim=1).reshape(batch, seq_len, -1), None


def transformers_in_range() -> bool:
    """Whether the installed transformers is one :data:`TRANSFORMERS_RANGE` covers."""
    import transformers
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    return Version(transformers.__version__) in SpecifierSet(TRANSFORMERS_RANGE)


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
        if not isinstance(module, DeepseekV4Attention) or module.compressor is None or getattr(module, _MARK, False):
            continue
        # Keep whatever forward the instance has now (accelerate hooks replace it), not the class's.
        module._swiftcore_unpacked_forward = module.forward
        module.forward = types.MethodType(_packed_forward, module)
        setattr(module, _MARK, True)
        patched += 1
    if patched:
        logger.debug("patched %d compressed attention layers for packed batches", patched)
    return patched
