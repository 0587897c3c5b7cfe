"""Model and tokenizer loading, requirements, LoRA merging, the checkpoint manifest, and writing checkpoint
directories atomically (nothing half-written, nothing overwritten)."""

from __future__ import annotations

from swiftcore._atomic import atomic_output_dir, check_output_dir
from swiftcore._lazy import moved
from swiftcore.models import (
    ARGS_FILE,
    check_requirements,
    load_model,
    load_tokenizer,
    read_hf_config,
    resolve_model_spec,
)
from swiftcore.models.adapters import resolve_checkpoint
from swiftcore.models.errors import UnknownModelTypeError
from swiftcore.models.loading import model_class_for
from swiftcore.models.manifest import (
    CheckpointManifest,
    build_manifest,
    manifest_template,
    read_manifest,
    warn_mismatches,
)
from swiftcore.models.resolve import read_generation_defaults

__all__ = [
    "ARGS_FILE",
    "CheckpointManifest",
    "UnknownModelTypeError",
    "atomic_output_dir",
    "build_manifest",
    "check_output_dir",
    "check_requirements",
    "load_model",
    "load_tokenizer",
    "manifest_template",
    "model_class_for",
    "read_generation_defaults",
    "read_hf_config",
    "read_manifest",
    "resolve_checkpoint",
    "resolve_model_spec",
    "warn_mismatches",
]


#: Names that left this module (plugin API 1.3): name -> new module.
_MOVED = {
    "load_processor_without_video": "swiftcore_media",
    "make_tiny": "swiftcore_tiny",
    "build_tiny_tokenizer": "swiftcore_tiny",
    "save_processor_config": "swiftcore_tiny",
    "merge_lora": "swiftcore_infer.merge",
    "part_problems": "swiftcore_testing.model_spec_checks",
    "special_token_problems": "swiftcore_testing.model_spec_checks",
    **dict.fromkeys(
        ("PACKING_KWARGS", "PATCHED_MARK", "PackedBatchError", "packed_cu_seq_lens", "packed_segments")
        + ("transformers_in_range", "wrap_forward"),
        "swiftcore_data.packed_layers",
    ),
}
__getattr__ = moved(__name__, "it is another distribution's now; depend on it and import it from there", _MOVED)
