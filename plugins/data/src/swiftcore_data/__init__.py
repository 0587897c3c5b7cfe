"""The dataset pipeline: load and validate rows, mix and split datasets, pack and collate batches.

Importing this package is cheap: ``datasets`` is imported when a parquet / Hugging Face source is read
and torch when a collator is called. Typical use by the trainer::

    from swiftcore_data import load_records, parse_dataset_arg, split_train_val, PaddingFreeCollator

    records = load_records([parse_dataset_arg(a) for a in args.dataset], seed=args.seed,
                           skip_bad_rows=args.skip_bad_rows)
    train, val = split_train_val(records, val_ratio=0.05, seed=args.seed)
"""

from __future__ import annotations

from swiftcore.api import lazy_exports
from swiftcore_data.collators import IGNORE_INDEX, PaddingCollator, PaddingFreeCollator
from swiftcore_data.errors import DataError, SkipReport
from swiftcore_data.formats import detect_format
from swiftcore_data.loading import Records, RecordStream, load_records
from swiftcore_data.normalize import normalize_record
from swiftcore_data.packing import pack_samples
from swiftcore_data.readers import iter_rows
from swiftcore_data.sources import DatasetSource, parse_dataset_arg
from swiftcore_data.split import split_train_val
from swiftcore_data.tool_rows import is_tool_row, refuse_tool_rows
from swiftcore_data.validate import ROLES, count_media_placeholders, validate_record

__all__ = [
    "IGNORE_INDEX",
    "PACKED_SDPA",
    "PACKING_KWARGS",
    "PATCHED_MARK",
    "ROLES",
    "DataError",
    "DatasetSource",
    "PackedBatchError",
    "PaddingCollator",
    "PaddingFreeCollator",
    "RecordStream",
    "Records",
    "SkipReport",
    "count_media_placeholders",
    "detect_format",
    "is_tool_row",
    "iter_rows",
    "keep_attention_implementation",
    "load_records",
    "normalize_record",
    "pack_samples",
    "packed_cu_seq_lens",
    "packed_segments",
    "parse_dataset_arg",
    "refuse_tool_rows",
    "row_slice",
    "slice_rotary",
    "split_train_val",
    "transformers_in_range",
    "use_packed_attention",
    "validate_record",
    "wrap_forward",
]

#: name -> the submodule that defines it, imported on first use (importing the package stays light).
_WHERE = {
    "PACKED_SDPA": "packed_attention",
    "use_packed_attention": "packed_attention",
    "PACKING_KWARGS": "packed_layers",
    "PATCHED_MARK": "packed_layers",
    "PackedBatchError": "packed_layers",
    "keep_attention_implementation": "packed_layers",
    "packed_cu_seq_lens": "packed_layers",
    "packed_segments": "packed_layers",
    "row_slice": "packed_layers",
    "slice_rotary": "packed_layers",
    "transformers_in_range": "packed_layers",
    "wrap_forward": "packed_layers",
}
__getattr__ = lazy_exports(__name__, _WHERE)
