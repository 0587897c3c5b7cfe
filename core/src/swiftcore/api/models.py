"""Model and tokenizer loading, requirements, LoRA merging, the checkpoint manifest, and writing checkpoint
directories atomically (nothing half-written, nothing overwritten)."""

from __future__ import annotations

from swiftcore._atomic import atomic_output_dir, check_output_dir
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
