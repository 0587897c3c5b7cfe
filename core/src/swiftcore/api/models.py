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
    read_hf_config,
    resolve_model_spec,
)
from swiftcore.models.adapters import merge_lora, resolve_checkpoint
from swiftcore.models.checks import part_problems, special_token_problems
from swiftcore.models.loading import model_class_for
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

__all__ = [
    "ARGS_FILE",
    "CheckpointManifest",
    "PACKING_KWARGS",
    "PATCHED_MARK",
    "PackedBatchError",
    "atomic_output_dir",
    "build_manifest",
    "check_output_dir",
    "check_requirements",
    "load_model",
    "load_tokenizer",
    "manifest_template",
    "model_class_for",
    "merge_lora",
    "packed_cu_seq_lens",
    "packed_segments",
    "part_problems",
    "read_generation_defaults",
    "read_hf_config",
    "read_manifest",
    "resolve_checkpoint",
    "resolve_model_spec",
    "special_token_problems",
    "transformers_in_range",
    "warn_mismatches",
    "wrap_forward",
]


#: Names plugin API 1.2 had here: name -> (new module, its distribution).
_MOVED = {
    "load_processor_without_video": ("swiftcore_media", "swiftcore-media"),
    "make_tiny": ("swiftcore_tiny", "swiftcore-tiny"),
    "build_tiny_tokenizer": ("swiftcore_tiny", "swiftcore-tiny"),
    "save_processor_config": ("swiftcore_tiny", "swiftcore-tiny"),
}


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        module, dist = _MOVED[name]
        raise ImportError(
            f"swiftcore.api.models.{name} moved to {module}.{name}: it is the {dist} distribution's now; depend on "
            "it and import it from there"
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
