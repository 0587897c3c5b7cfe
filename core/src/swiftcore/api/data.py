"""Dataset rows, sources and collators, as the core's data pipeline reads and batches them."""

from __future__ import annotations

from swiftcore.data import PaddingCollator, PaddingFreeCollator, load_records, pack_samples, split_train_val
from swiftcore.data.errors import DataError
from swiftcore.data.normalize import normalize_record
from swiftcore.data.readers import iter_rows
from swiftcore.data.sources import parse_dataset_arg

__all__ = [
    "DataError",
    "PaddingCollator",
    "PaddingFreeCollator",
    "iter_rows",
    "load_records",
    "normalize_record",
    "pack_samples",
    "parse_dataset_arg",
    "split_train_val",
]
