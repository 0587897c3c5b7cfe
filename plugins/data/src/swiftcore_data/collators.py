"""Batch collators for encoded text samples: padding, and padding-free (packed) batches.

Samples are dicts with ``"input_ids": list[int]`` and ``"labels": list[int]`` (``-100`` = no loss),
aligned with ``input_ids`` the way Hugging Face causal LMs expect (the model shifts them). torch is
imported when a collator is called, never when this module is imported.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from swiftcore_data.errors import DataError

__all__ = ["IGNORE_INDEX", "PaddingCollator", "PaddingFreeCollator"]

IGNORE_INDEX = -100


def _lists(samples: Sequence[Mapping[str, Any]], who: str) -> list[tuple[list[int], list[int] | None]]:
    if not samples:
        raise DataError(who, None, "got an empty batch")
    out = []
    for i, sample in enumerate(samples):
        ids = list(sample["input_ids"])
        labels = list(sample["labels"]) if sample.get("labels") is not None else None
        if not ids:
            raise DataError(str(sample.get("_source", f"{who} sample {i}")), "input_ids", "empty sample")
        if labels is not None and len(labels) != len(ids):
            raise DataError(
                str(sample.get("_source", f"{who} sample {i}")),
                "labels",
                f"{len(labels)} labels for {len(ids)} input_ids; the template must emit one label per token",
            )
        out.append((ids, labels))
    return out


@dataclass
class PaddingCollator:
    """Pad a batch to its longest sample (rounded up to ``pad_to_multiple_of``).

    Args:
        pad_token_id: the token id written into padding positions of ``input_ids``.
        padding_side: ``"right"`` (training) or ``"left"`` (batched generation).
        pad_to_multiple_of: round the padded length up to a multiple of this (e.g. 8 for tensor cores).

    Returns (when called on a list of samples):
        ``{"input_ids": LongTensor[B, L], "labels": LongTensor[B, L], "attention_mask": LongTensor[B, L]}``;
        labels are -100 on padding, the mask is 1 on real tokens. ``labels`` is left out when no sample has it.
    """

    pad_token_id: int
    padding_side: str = "right"
    pad_to_multiple_of: int | None = None

    def __post_init__(self) -> None:
        if self.padding_side not in ("right", "left"):
            raise DataError("--padding-side", None, f"must be 'right' or 'left', got {self.padding_side!r}")
        if self.pad_to_multiple_of is not None and self.pad_to_multiple_of <= 0:
            raise DataError("pad_to_multiple_of", None, f"must be a positive integer, got {self.pad_to_multiple_of!r}")

    def __call__(self, samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Collate ``samples`` into padded tensors (see the class docstring)."""
        import torch

        rows = _lists(samples, "PaddingCollator")
        length = max(len(ids) for ids, _ in rows)
        if self.pad_to_multiple_of:
            length = -(-length // self.pad_to_multiple_of) * self.pad_to_multiple_of
        has_labels = any(labels is not None for _, labels in rows)
        batch: dict[str, list[list[int]]] = {"input_ids": [], "labels": [], "attention_mask": []}
        for ids, labels in rows:
            pad = length - len(ids)
            # A sample without labels in a labelled batch learns nothing (all -100).
            lab = labels if labels is not None else [IGNORE_INDEX] * len(ids)
            parts = {
                "input_ids": (ids, [self.pad_token_id] * pad),
                "labels": (lab, [IGNORE_INDEX] * pad),
                "attention_mask": ([1] * len(ids), [0] * pad),
            }
            for key, (real, padding) in parts.items():
                batch[key].append(real + padding if self.padding_side == "right" else padding + real)
        if not has_labels:
            del batch["labels"]
        return {key: torch.tensor(value, dtype=torch.long) for key, value in batch.items()}


@dataclass
class PaddingFreeCollator:
    """Concatenate a batch into one row with per-sample ``position_ids`` (padding-free / packed training).

    Follows ``transformers.DataCollatorWithFlattening``: no padding, ``position_ids`` restart at 0 for
    each sample, and the first label of every sample is -100. The model shifts labels left by one, so
    the label at a sample's first token is what the *previous* sample's last token would learn to
    predict; masking it keeps every sample's loss exactly what it is when the sample runs alone.

    transformers 5.x builds a block-diagonal causal mask for sdpa / eager from ``position_ids`` (and
    flash-attention uses ``cu_seq_lens_*``), but only when there is no attention mask and no KV cache.
    Causal LMs create a cache whenever ``use_cache`` is on, even in training mode, and the samples then
    attend to each other. The batch therefore carries ``use_cache=False`` (set ``disable_cache=False``
    to leave it out if your model call sets it).

    A batch element may be a sample or a list of samples (a bin from :func:`pack_samples`); bins are
    flattened in order.

    Returns (when called):
        ``input_ids``, ``labels``, ``position_ids``: LongTensor[1, T]; ``seq_lens``: IntTensor[B];
        ``cu_seq_lens_q`` / ``cu_seq_lens_k``: IntTensor[B + 1] (cumulative lengths from 0);
        ``max_length_q`` / ``max_length_k``: int; ``use_cache``: False.
    """

    disable_cache: bool = True

    def __call__(self, samples: Sequence[Mapping[str, Any] | Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
        """Collate ``samples`` (or bins of samples) into one packed row (see the class docstring)."""
        import torch

        flat: list[Any] = [s for item in samples for s in (item if isinstance(item, list | tuple) else [item])]
        rows = _lists(flat, "PaddingFreeCollator")
        input_ids: list[int] = []
        labels: list[int] = []
        position_ids: list[int] = []
        seq_lens = [len(ids) for ids, _ in rows]
        for ids, lab in rows:
            input_ids += ids
            labels += [IGNORE_INDEX] + (lab[1:] if lab is not None else [IGNORE_INDEX] * (len(ids) - 1))
            position_ids += range(len(ids))
        cu_seq_lens = [0]
        for n in seq_lens:
            cu_seq_lens.append(cu_seq_lens[-1] + n)
        cu = torch.tensor(cu_seq_lens, dtype=torch.int32)
        batch: dict[str, Any] = {
            "input_ids": torch.tensor([input_ids], dtype=torch.long),
            "labels": torch.tensor([labels], dtype=torch.long),
            "position_ids": torch.tensor([position_ids], dtype=torch.long),
            "seq_lens": torch.tensor(seq_lens, dtype=torch.int32),
            "cu_seq_lens_q": cu,
            "cu_seq_lens_k": cu,
            "max_length_q": max(seq_lens),
            "max_length_k": max(seq_lens),
        }
        if self.disable_cache:
            batch["use_cache"] = False
        return batch
