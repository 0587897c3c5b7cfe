"""Cut a training batch into contiguous sequence shards, one per sequence-parallel rank.

Two layouts are supported, the same code for both: a padded batch ``[B, S]`` (with an ``attention_mask``)
and packed rows whose ``position_ids`` restart at 0 for every sample (padding-free, usually ``B == 1``).

Labels are shifted over the *whole* sequence before it is cut, so the last token of a shard is labelled
with the first token of the next shard, and the model's own shift (which would drop one label per shard)
is never used: the shard carries ``shift_labels`` for :func:`~swiftcore_sequence_parallel.loss.sequence_parallel_loss`.

Sequence lengths must be a multiple of the SP size: this module raises a ValueError rather than padding,
because padding here would change the batch the collator built (and its token count) behind its back;
pad in the collator (``pad_to_multiple_of``) instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from swiftcore_sequence_parallel import IGNORE_INDEX

__all__ = ["SEQUENCE_KEYS", "check_divisible", "default_position_ids", "shard_batch", "shift_labels"]

#: Batch entries cut along the sequence (dim 1); any other entry is passed through unchanged.
SEQUENCE_KEYS = ("input_ids", "attention_mask", "position_ids", "shift_labels", "inputs_embeds", "token_type_ids")


def check_divisible(seq_len: int, sp_size: int) -> None:
    """ValueError unless ``seq_len`` splits into ``sp_size`` equal shards."""
    if sp_size < 1:
        raise ValueError(f"sequence-parallel size must be >= 1, got {sp_size}")
    if seq_len % sp_size:
        multiple = -(-seq_len // sp_size) * sp_size
        raise ValueError(
            f"sequence length {seq_len} is not divisible by the sequence-parallel size {sp_size}: pad every "
            f"batch to a multiple of {sp_size} (here {multiple}; e.g. pad_to_multiple_of={sp_size} in the "
            "collator, labels -100 on the padding) before sharding"
        )


def default_position_ids(input_ids: Any) -> Any:
    """``[1, S]`` positions ``0..S-1``: what transformers uses when a batch has none."""
    import torch

    return torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)


def shift_labels(labels: Any, position_ids: Any = None) -> Any:
    """Labels shifted left by one over the whole sequence: position ``t`` is labelled with token ``t + 1``.

    The last position gets ``-100``, and so does the last token of every packed sample (where the next
    position id does not follow on by one), so no sample learns to predict the next sample's first token.

    Args:
        labels: ``[B, S]`` token labels (``-100`` where no loss is wanted).
        position_ids: ``[B, S]`` or ``[1, S]``; only needed for packed rows.
    """
    import torch

    shifted = torch.full_like(labels, IGNORE_INDEX)
    shifted[:, :-1] = labels[:, 1:]
    if position_ids is not None:
        pos = position_ids.expand(labels.shape[0], -1)
        # Same rule transformers uses to find packed samples (masking_utils.find_packed_sequence_indices).
        boundary = (pos[:, 1:] - pos[:, :-1]) != 1
        shifted[:, :-1] = shifted[:, :-1].masked_fill(boundary, IGNORE_INDEX)
    return shifted


def shard_batch(batch: Mapping[str, Any], sp_rank: int, sp_size: int) -> dict[str, Any]:
    """The shard of ``batch`` that sequence-parallel rank ``sp_rank`` of ``sp_size`` computes.

    ``labels`` (if present) become globally shifted ``shift_labels``; ``position_ids`` are filled in when
    missing and stay the global ones (rotary embeddings and packed-sample boundaries need them). Every entry
    in :data:`SEQUENCE_KEYS` is cut into ``sp_size`` contiguous chunks along dim 1 and chunk ``sp_rank`` kept.

    Args:
        batch: ``input_ids`` (or ``inputs_embeds``) ``[B, S]``, optional ``labels``, ``attention_mask``,
            ``position_ids``.
        sp_rank: this rank's index in its SP group.
        sp_size: SP group size.

    Returns:
        A new dict; pass everything but ``shift_labels`` to the model.

    Raises:
        ValueError: ``S`` is not a multiple of ``sp_size``, or ``sp_rank`` is out of range.
    """
    ids = batch["input_ids"] if batch.get("input_ids") is not None else batch["inputs_embeds"]
    seq_len = int(ids.shape[1])
    check_divisible(seq_len, sp_size)
    if not 0 <= sp_rank < sp_size:
        raise ValueError(f"sequence-parallel rank {sp_rank} is out of range for size {sp_size}")
    out = {k: v for k, v in batch.items() if k != "labels"}
    if out.get("position_ids") is None:
        out["position_ids"] = default_position_ids(ids)
    if batch.get("labels") is not None:
        # Packed rows are recognised by their position ids; an explicit padded batch needs no boundary rule.
        packed = batch.get("attention_mask") is None
        out["shift_labels"] = shift_labels(batch["labels"], out["position_ids"] if packed else None)
    chunk = seq_len // sp_size
    for key in SEQUENCE_KEYS:
        value = out.get(key)
        if value is not None and value.dim() >= 2 and value.shape[1] == seq_len:
            out[key] = value[:, sp_rank * chunk : (sp_rank + 1) * chunk]
    return out
