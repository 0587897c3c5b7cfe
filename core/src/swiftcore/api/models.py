"""Model and tokenizer loading, requirements, LoRA merging, packed sequences, tiny checkpoints, and writing
checkpoint directories atomically (nothing half-written, nothing overwritten)."""

from __future__ import annotations

from typing import Any

from swiftcore._atomic import atomic_output_dir, check_output_dir
from swiftcore.models import (
    ARGS_FILE,
    check_requirements,
    load_model,
    load_tokenizer,
    make_tiny,
    read_hf_config,
    resolve_model_spec,
)
from swiftcore.models.adapters import merge_lora, resolve_checkpoint
from swiftcore.models.checks import part_problems, special_token_problems
from swiftcore.models.manifest import (
    CheckpointManifest,
    build_manifest,
    manifest_template,
    read_manifest,
    warn_mismatches,
)
from swiftcore.models.packed_layers import (
    PACKING_KWARGS,
    PATCHED_MARK,
    PackedBatchError,
    packed_cu_seq_lens,
    packed_segments,
    transformers_in_range,
    wrap_forward,
)
from swiftcore.models.resolve import read_generation_defaults
from swiftcore.models.tiny_processor import save_processor_config
from swiftcore.models.tiny_tokenizer import build_tiny_tokenizer

__all__ = [
    "ARGS_FILE",
    "CheckpointManifest",
    "PACKING_KWARGS",
    "PATCHED_MARK",
    "PackedBatchError",
    "atomic_output_dir",
    "build_manifest",
    "build_tiny_tokenizer",
    "check_output_dir",
    "check_requirements",
    "load_model",
    "load_tokenizer",
    "make_tiny",
    "manifest_template",
    "merge_lora",
    "packed_cu_seq_lens",
    "packed_segments",
    "part_problems",
    "read_generation_defaults",
    "read_hf_config",
    "read_manifest",
    "resolve_checkpoint",
    "resolve_model_spec",
    "save_processor_config",
    "special_token_problems",
    "transformers_in_range",
    "warn_mismatches",
    "wrap_forward",
]


def __getattr__(name: str) -> Any:
    if name == "load_processor_without_video":  # plugin API 1.2 had it here
        raise ImportError(
            "swiftcore.api.models.load_processor_without_video moved to swiftcore_media.load_processor_without_video: "
            "media processing is the swiftcore-media distribution now; depend on it and import it from there"
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
