"""Model resolution and loading.

Importing this package is cheap (no torch, no transformers): they are imported by the functions
that load or build models.

Example::

    import swiftcore
    from swiftcore.models import resolve_model_spec, load_model, load_tokenizer

    plugins = swiftcore.load_plugins()
    spec = resolve_model_spec("./ckpt", plugins)
    model = load_model(spec, "./ckpt", plugins, torch_dtype="float32")
    tokenizer = load_tokenizer("./ckpt")
"""

from __future__ import annotations

from swiftcore.models.errors import (
    AmbiguousModelError,
    MissingConfigError,
    ModelResolutionError,
    RequirementsError,
    UnknownModelTypeError,
)
from swiftcore.models.loading import load_model, load_processor, load_tokenizer, model_class_for
from swiftcore.models.requirements import check_requirements, unmet_requirements
from swiftcore.models.resolve import ARGS_FILE, read_args_file, read_hf_config, resolve_model_spec

__all__ = [
    "ARGS_FILE",
    "AmbiguousModelError",
    "MissingConfigError",
    "ModelResolutionError",
    "RequirementsError",
    "UnknownModelTypeError",
    "check_requirements",
    "load_model",
    "load_processor",
    "load_tokenizer",
    "model_class_for",
    "read_args_file",
    "read_hf_config",
    "resolve_model_spec",
    "unmet_requirements",
]
