"""Shared parts for model plugins that make a layer exact on packed (padding-free) batches.

A packed row holds several samples, with ``position_ids`` restarting at 0 for each and, from
:class:`swiftcore_data.PaddingFreeCollator`, flash-attention's ``cu_seq_lens_q`` (cumulative sample
lengths over the flattened rows). transformers honours those boundaries in softmax attention, but
layers that mix tokens some other way (a linear-attention recurrence, a causal conv, a compressor over
fixed windows) may not. A family's plugin then wraps those layers' ``forward`` on the loaded instance
and runs them per sample; this module holds what every such patch needs: finding the samples
(:func:`packed_cu_seq_lens`, :func:`packed_segments`), refusing boundaries that do not fit the batch
(:class:`PackedBatchError`), gating the patch to the transformers versions it was checked against
(:func:`transformers_in_range`) and swapping an instance's ``forward`` once (:func:`wrap_forward`).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from itertools import pairwise
from typing import Any

from swiftcore.api import SwiftcoreError

__all__ = [
    "KEEP_ATTENTION",
    "PACKING_KWARGS",
    "PackedBatchError",
    "packed_cu_seq_lens",
    "packed_segments",
    "keep_attention_implementation",
    "row_slice",
    "slice_rotary",
    "transformers_in_range",
    "wrap_forward",
]

#: The flash-attention varlen kwargs a packed batch carries. A layer run per sample (or on a re-laid
#: padded batch) must not pass them on: a kernel would apply the boundaries a second time.
PACKING_KWARGS = ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")
#: Set on a module whose ``forward`` was wrapped, so a second patch leaves it alone.
PATCHED_MARK = "_swiftcore_packing_patched"
#: Where :func:`wrap_forward` keeps the forward the instance had before.
UNPACKED_FORWARD = "_swiftcore_unpacked_forward"
#: Set (to the reason) on a model whose attention implementation must not be switched for packed training
#: (``swiftcore_data.packed_attention.use_packed_attention`` leaves it as it is): see
#: :func:`keep_attention_implementation`.
KEEP_ATTENTION = "_swiftcore_keep_attn_implementation"


class PackedBatchError(SwiftcoreError):
    """A packed batch's boundaries (``cu_seq_lens_q``) do not fit the tokens a layer got."""


def packed_cu_seq_lens(position_ids: Any) -> Any | None:
    """Cumulative sample lengths of packed rows, from where ``position_ids`` stop counting up by one.

    Rows are flattened in order (the varlen layout of flash-attention), so a batch of several packed
    rows works too, and every row starts a sample whatever its first position. Mirrors
    ``transformers.masking_utils.find_packed_sequence_indices``.

    Args:
        position_ids: LongTensor ``[batch, seq_len]``.

    Returns:
        IntTensor ``[n_samples + 1]`` starting at 0, or None when no row restarts (nothing is packed).
    """
    import torch

    flat = position_ids.reshape(-1)
    starts = torch.ones_like(flat, dtype=torch.bool)
    starts[1:] = flat[1:] != flat[:-1] + 1
    starts.view(position_ids.shape)[:, 0] = True
    if int(starts.sum()) == position_ids.shape[0]:
        return None
    bounds = torch.nonzero(starts).flatten()
    end = torch.tensor([flat.numel()], device=bounds.device, dtype=bounds.dtype)
    return torch.cat([bounds, end]).to(torch.int32)


def packed_segments(position_ids: Any, cu_seq_lens: Any, batch: int, seq_len: int) -> list[tuple[int, int, int]] | None:
    """The ``(row, start, end)`` token ranges of the samples packed in a ``[batch, seq_len]`` input.

    Args:
        position_ids: LongTensor ``[batch or 1, seq_len]``, used when ``cu_seq_lens`` is None (a
            broadcast batch of 1 serves every row).
        cu_seq_lens: IntTensor ``[n + 1]`` of cumulative lengths over the flattened rows, or None.
        batch: rows in the input.
        seq_len: tokens per row.

    Returns:
        The ranges in order, or None when each row holds one sample (or neither input is given).

    Raises:
        PackedBatchError: ``cu_seq_lens`` does not cover the input, or a sample spans two rows.
    """
    if cu_seq_lens is not None:
        bounds = [int(b) for b in cu_seq_lens.reshape(-1).tolist()]
        if not bounds or bounds[0] != 0 or bounds[-1] != batch * seq_len or any(a >= b for a, b in pairwise(bounds)):
            raise PackedBatchError(
                f"cu_seq_lens_q={bounds} does not cover the {batch}x{seq_len} tokens of the batch; pass the "
                "cu_seq_lens_q that PaddingFreeCollator builds for it, or leave it out and send position_ids "
                "that restart at 0 for each sample"
            )
    elif position_ids is not None:
        cu = packed_cu_seq_lens(position_ids.expand(batch, -1))
        if cu is None:
            return None
        bounds = [int(b) for b in cu.tolist()]
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


def row_slice(tensor: Any, row: int, start: int, end: int | None) -> Any:
    """``tensor[row, start:end]`` keeping the batch dim (a broadcast batch of 1 serves every row)."""
    row = row if tensor.shape[0] > 1 else 0
    return tensor[row : row + 1, start:end]


def slice_rotary(position_embeddings: Any, row: int, start: int, end: int) -> Any:
    """One sample's slice of the rotary tables: a ``(cos, sin)`` pair or a ``{rope type: (cos, sin)}`` dict."""
    if isinstance(position_embeddings, dict):
        return {key: slice_rotary(value, row, start, end) for key, value in position_embeddings.items()}
    cos, sin = position_embeddings
    return row_slice(cos, row, start, end), row_slice(sin, row, start, end)


def keep_attention_implementation(model: Any, why: str) -> None:
    """Mark ``model`` so that packed training keeps its attention implementation (sdpa or eager) instead of the
    per-sample one of ``swiftcore_data.packed_attention``: for a model whose modeling code branches on the
    implementation's name (GLM-5 builds its sparse top-k mask only under "eager" and "sdpa"), or whose attention
    layers a family patch already runs per sample. ``why`` is logged when the switch is skipped."""
    setattr(model, KEEP_ATTENTION, why)


def transformers_in_range(specifier: str) -> bool:
    """Whether the installed transformers is in ``specifier`` (a PEP 440 range such as ``">=5.19,<6"``)."""
    import transformers
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    return Version(transformers.__version__) in SpecifierSet(specifier)


def wrap_forward(module: Any, forward: Callable[..., Any]) -> bool:
    """Replace ``module``'s instance ``forward`` by ``forward`` (bound to it), once.

    The forward the instance has now (accelerate hooks replace the class's) stays reachable as
    ``module._swiftcore_unpacked_forward`` for ``forward`` to call.

    Returns:
        False when the module was patched before (nothing changes).
    """
    if getattr(module, PATCHED_MARK, False):
        return False
    setattr(module, UNPACKED_FORWARD, module.forward)
    module.forward = types.MethodType(forward, module)
    setattr(module, PATCHED_MARK, True)
    return True
