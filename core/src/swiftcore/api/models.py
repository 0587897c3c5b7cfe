"""Model and tokenizer loading, requirements, LoRA merging, packed sequences and tiny checkpoints."""

from __future__ import annotations

from swiftcore.models import check_requirements, load_model, load_tokenizer, read_hf_config, resolve_model_spec
from swiftcore.models.adapters import merge_lora
from swiftcore.models.packed_layers import (
    PACKING_KWARGS,
    PATCHED_MARK,
    PackedBatchError,
    packed_cu_seq_lens,
    packed_segments,
    transformers_in_range,
    wrap_forward,
)
from swiftcore.models.tiny_processor import save_processor_config
from swiftcore.models.tiny_tokenizer import build_tiny_tokenizer
from swiftcore.train.media import load_processor_without_video

__all__ = [
    "PACKING_KWARGS",
    "PATCHED_MARK",
    "PackedBatchError",
    "build_tiny_tokenizer",
    "check_requirements",
    "load_model",
    "load_processor_without_video",
    "load_tokenizer",
    "merge_lora",
    "packed_cu_seq_lens",
    "packed_segments",
    "read_hf_config",
    "resolve_model_spec",
    "save_processor_config",
    "transformers_in_range",
    "wrap_forward",
]
