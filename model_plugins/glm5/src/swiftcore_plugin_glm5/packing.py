"""Exact padding-free (packed) training for GLM-5's DSA attention.

Why: a packed batch is one row holding several samples, with ``position_ids`` restarting at 0 for each (see
``swiftcore_data.PaddingFreeCollator``). GLM-5's attention (transformers' ``GlmMoeDsaAttention``) adds the
lightning indexer's top-k selection to the attention mask it is given: each query keeps only its ``index_topk``
best-scored keys. Over a packed row the indexer scores and picks among the row, and the per-sample softmax
attention of packed training (``swiftcore_data.packed_attention``, which attends each sample's span causally and
never reads the row's mask) would drop the top-k selection altogether. Measured on the tiny checkpoint (three
samples, ``tests/test_packing_exact.py``): a summed loss 0.26 off with transformers' own masked sdpa, 0.58 off with
the per-sample one, against the tolerance of 1e-5.

What: :func:`patch_packed_dsa_attention` wraps the ``forward`` of each attention layer. On a packed row (no cache;
boundaries from ``cu_seq_lens_q`` when the batch has it, else from ``position_ids`` restarts) the layer runs once
per sample, on that sample's slice of the hidden states, position ids, rotary tables and mask, exactly as it runs
when the sample is alone, so its indexer and its sparse mask are the sample's own. The model keeps transformers'
own attention implementation (``keep_attention_implementation``): GLM-5's attention builds the sparse mask only
under the names "eager" and "sdpa", and its layers already see one sample at a time. A "shared" DSA layer reuses the
top-k of the full layer before it: a split layer returns its samples' top-k as :class:`PerSampleTopk` (one tensor a
sample, of different lengths), and the next split layer hands each sample its own. A split layer returns no
attention weights (None).

When it can be removed: once transformers' GLM-5 indexer honours packed sequence boundaries and its sparse mask
reaches varlen attention (checked against 5.19; :data:`TRANSFORMERS_RANGE` is where this module applies its
patch; outside it, it logs why it did nothing, and ``tests/test_packing_exact.py`` says whether the model is exact
without it).
"""

from __future__ import annotations

import logging
from typing import Any

from swiftcore_data import (
    PACKING_KWARGS,
    keep_attention_implementation,
    packed_segments,
    row_slice,
    slice_rotary,
    transformers_in_range,
    wrap_forward,
)

__all__ = ["TRANSFORMERS_RANGE", "PerSampleTopk", "patch_packed_dsa_attention"]

logger = logging.getLogger("swiftcore.plugins.glm5")

#: transformers versions whose GLM-5 attention this patch was checked against (and needs it).
TRANSFORMERS_RANGE = ">=5.19,<6"


class PerSampleTopk(tuple):
    """The top-k key indices a split DSA layer picked, one ``[1, length, topk]`` tensor per packed sample, in row
    order: what the next "shared" layer reuses, sample by sample."""


def _packed_forward(
    self: Any,
    hidden_states: Any,
    position_embeddings: Any,
    attention_mask: Any,
    past_key_values: Any = None,
    position_ids: Any = None,
    prev_topk_indices: Any = None,
    **kwargs: Any,
) -> tuple[Any, Any, Any]:
    """A DSA attention forward that runs each packed sample on its own (see the module docstring)."""
    import torch

    unpacked = self._swiftcore_unpacked_forward
    batch, seq_len = hidden_states.shape[:2]
    segments = None
    if past_key_values is None:
        segments = packed_segments(position_ids, kwargs.get("cu_seq_lens_q"), batch, seq_len)
    if segments is None:
        if isinstance(prev_topk_indices, PerSampleTopk):  # a split layer cannot hand its top-k to an unsplit one
            raise RuntimeError("GLM-5 packing: a shared DSA layer got per-sample top-k but its batch is not packed")
        return unpacked(
            hidden_states,
            position_embeddings,
            attention_mask,
            past_key_values,
            position_ids=position_ids,
            prev_topk_indices=prev_topk_indices,
            **kwargs,
        )
    rest = {key: value for key, value in kwargs.items() if key not in PACKING_KWARGS}
    outputs, picked = [], []
    for index, (row, start, end) in enumerate(segments):
        mask = attention_mask
        if isinstance(mask, torch.Tensor):
            mask = row_slice(mask, row, 0, None)[..., start:end, start:end]
        previous = prev_topk_indices[index] if isinstance(prev_topk_indices, PerSampleTopk) else prev_topk_indices
        output, _, topk = unpacked(
            hidden_states[row : row + 1, start:end],
            slice_rotary(position_embeddings, row, start, end),
            mask,
            None,
            position_ids=None if position_ids is None else row_slice(position_ids, row, start, end),
            prev_topk_indices=previous,
            **rest,
        )
        outputs.append(output)
        picked.append(topk)
    return torch.cat(outputs, dim=1).reshape(batch, seq_len, -1), None, PerSampleTopk(picked)


def patch_packed_dsa_attention(model: Any) -> int:
    """Make ``model``'s DSA attention layers exact on packed batches (see the module docstring).

    Patches the instances (not the class), so models loaded elsewhere are untouched. Calling it again on the same
    model does nothing.

    Args:
        model: a loaded GLM-5 (``glm_moe_dsa``) model.

    Returns:
        How many layers were patched (0 when transformers is outside :data:`TRANSFORMERS_RANGE`, the model has no
        DSA attention layer, or it was patched before).
    """
    # Whatever the version: per-sample attention under another name would drop GLM-5's sparse mask.
    keep_attention_implementation(
        model,
        "GLM-5's attention applies its DSA top-k mask only under transformers' own eager and sdpa, and every "
        "attention layer already runs each packed sample alone",
    )
    if not transformers_in_range(TRANSFORMERS_RANGE):
        import transformers

        logger.warning(
            "transformers %s is outside %s: GLM-5's DSA attention was not patched for packed batches; check "
            "tests/test_packing_exact.py before training padding-free",
            transformers.__version__,
            TRANSFORMERS_RANGE,
        )
        return 0
    from transformers.models.glm_moe_dsa.modeling_glm_moe_dsa import GlmMoeDsaAttention

    patched = sum(
        wrap_forward(module, _packed_forward) for module in model.modules() if isinstance(module, GlmMoeDsaAttention)
    )
    if patched:
        logger.debug("patched %d DSA attention layers for packed batches", patched)
    return patched
