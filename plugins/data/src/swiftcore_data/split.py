"""Hold out a validation split, deterministically by seed."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TypeVar

from swiftcore_data.errors import DataError

__all__ = ["split_train_val"]

T = TypeVar("T")


def split_train_val(records: Sequence[T], val_ratio: float = 0.1, seed: int = 0) -> tuple[list[T], list[T]]:
    """Split records into train and validation parts.

    A seeded random ``round(len(records) * val_ratio)`` records (at least one when ``val_ratio > 0``) go
    to validation; both parts keep the input order.

    Args:
        records: the records (or encoded samples) to split.
        val_ratio: the validation fraction, in ``[0, 1)``. 0 returns everything as train.
        seed: the same seed picks the same validation records.

    Returns:
        ``(train, val)``.

    Raises:
        DataError: ``val_ratio`` is outside ``[0, 1)``, or the split would leave train or validation empty.
    """
    if not 0 <= val_ratio < 1:
        raise DataError("--split-ratio", None, f"validation ratio must be in [0, 1), got {val_ratio!r}")
    n = len(records)
    if val_ratio == 0:
        return list(records), []
    n_val = max(1, round(n * val_ratio))
    if n_val >= n:
        raise DataError(
            "--split-ratio",
            None,
            f"a validation ratio of {val_ratio:g} leaves no training rows out of {n}; "
            "lower it or pass a separate --val-dataset",
        )
    val_index = set(random.Random(f"swiftcore_data:{seed}:split").sample(range(n), n_val))
    train = [r for i, r in enumerate(records) if i not in val_index]
    val = [r for i, r in enumerate(records) if i in val_index]
    return train, val
