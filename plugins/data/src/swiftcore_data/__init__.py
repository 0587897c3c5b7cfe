"""The dataset pipeline: load and validate rows, mix and split datasets, pack and collate batches.

Importing this package is cheap: ``datasets`` is imported when a parquet / Hugging Face source is read
and torch when a collator is called. Typical use by the trainer::

    from swiftcore_data import load_records, parse_dataset_arg, split_train_val, PaddingFreeCollator

    records = load_records([parse_dataset_arg(a) for a in args.dataset], seed=args.seed,
                           skip_bad_rows=args.skip_bad_rows)
    train, val = split_train_val(records, val_ratio=0.05, seed=args.seed)
"""

from __future__ import annotations

from swiftcore_data.collators import IGNORE_INDEX, PaddingCollator, PaddingFreeCollator
from swiftcore_data.errors import DataError, SkipReport
from swiftcore_data.formats import detect_format
from swiftcore_data.loading import Records, RecordStream, load_records
from swiftcore_data.normalize import normalize_record
from swiftcore_data.packing import pack_samples
from swiftcore_data.readers import iter_rows
from swiftcore_data.sources import DatasetSource, parse_dataset_arg
from swiftcore_data.split import split_train_val
from swiftcore_data.validate import ROLES, count_media_placeholders, validate_record

__all__ = [
    "IGNORE_INDEX",
    "ROLES",
    "DataError",
    "DatasetSource",
    "PaddingCollator",
    "PaddingFreeCollator",
    "RecordStream",
    "Records",
    "SkipReport",
    "count_media_placeholders",
    "detect_format",
    "iter_rows",
    "load_records",
    "normalize_record",
    "pack_samples",
    "parse_dataset_arg",
    "split_train_val",
    "validate_record",
]
