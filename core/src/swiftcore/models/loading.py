"""Load a model, tokenizer or processor for a resolved :class:`~swiftcore.specs.ModelSpec`.

torch and transformers are imported inside the functions, only when something is loaded.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swiftcore._lazy import resolve
from swiftcore.errors import SwiftcoreError
from swiftcore.models.requirements import check_requirements
from swiftcore.models.resolve import read_hf_config

if TYPE_CHECKING:
    from swiftcore.api.protocols import PluginSet

__all__ = ["load_model", "load_processor", "load_tokenizer", "model_class_for"]

logger = logging.getLogger("swiftcore.models")


def _what(spec: Any, field: str) -> str:
    return f"{field} of model {spec.name!r} ({spec.provider or 'no provider'})"


def model_class_for(spec: Any, hf_config: dict[str, Any] | None = None) -> Any:
    """The class whose ``from_pretrained`` loads a checkpoint of ``spec``.

    When the checkpoint's first ``architectures`` entry is one the spec claims and transformers has it (e.g. a text-only
    ``Qwen3_5ForCausalLM`` export of a multimodal family), that class is used; otherwise ``spec.model_class``.

    Args:
        spec: the model spec.
        hf_config: the checkpoint's parsed ``config.json``, if known.
    """
    architectures = list((hf_config or {}).get("architectures") or ())
    default_module = (spec.model_class or "").partition(":")[0]
    if architectures and architectures[0] in spec.architectures and default_module == "transformers":
        import transformers

        cls = getattr(transformers, architectures[0], None)
        if cls is not None:
            return cls
    if spec.model_class is None:
        raise SwiftcoreError(f"model {spec.name!r} ({spec.provider}) names no model_class; load it with its loader")
    return resolve(spec.model_class, what=_what(spec, "model_class"))


def _dtype(torch_dtype: Any) -> Any:
    """``"float32"``/``"bfloat16"``/``"auto"``/a ``torch.dtype`` -> what ``from_pretrained(dtype=...)`` takes."""
    if torch_dtype is None or torch_dtype == "auto" or not isinstance(torch_dtype, str):
        return torch_dtype
    import torch

    value = getattr(torch, torch_dtype.removeprefix("torch."), None)
    if not isinstance(value, torch.dtype):
        raise SwiftcoreError(
            f"torch_dtype {torch_dtype!r} is not a torch dtype; use float32, bfloat16, float16 or auto"
        )
    return value


def load_model(
    spec: Any, model_dir: str | Path, plugins: PluginSet | None = None, torch_dtype: Any = "float32", **kwargs: Any
) -> Any:
    """Load the model in ``model_dir`` as ``spec`` says, then run ``swiftcore_post_model_load``.

    Args:
        spec: the resolved :class:`~swiftcore.specs.ModelSpec` (see :func:`resolve_model_spec`).
        model_dir: the checkpoint directory.
        plugins: the loaded plugins; their ``swiftcore_post_model_load`` hooks see the model (None skips them).
        torch_dtype: ``"float32"``, ``"bfloat16"``, ``"float16"``, ``"auto"`` or a ``torch.dtype``.
        **kwargs: passed to the loader or ``from_pretrained`` (e.g. ``attn_implementation``).

    Returns:
        The loaded ``torch.nn.Module``.

    Raises:
        RequirementsError: ``spec.requires`` are not met.
        SwiftcoreError: the loader or model class cannot be imported, or the checkpoint lacks weights of the class.
    """
    check_requirements(spec)
    check_weight_files(model_dir)
    model_dir = str(model_dir)
    dtype = _dtype(torch_dtype)
    if spec.loader:
        loader = resolve(spec.loader, what=_what(spec, "loader"))
        logger.info("load %s with loader %s (dtype %s)", model_dir, spec.loader, torch_dtype)
        model = loader(model_dir, spec=spec, torch_dtype=dtype, **kwargs)
    else:
        cls = model_class_for(spec, read_hf_config(model_dir))
        logger.info("load %s with %s.from_pretrained (dtype %s)", model_dir, cls.__name__, torch_dtype)
        model, info = cls.from_pretrained(model_dir, dtype=dtype, output_loading_info=True, **kwargs)
        if missing := sorted(info["missing_keys"]):  # transformers starts them random and says so in a log only
            raise SwiftcoreError(
                f"{model_dir}: {len(missing)} weight(s) of {cls.__name__} are not in its weight files "
                f"({', '.join(missing[:6])}{', ...' if len(missing) > 6 else ''}); they would start random: copy the "
                "whole checkpoint (every file model.safetensors.index.json names)"
            )
    if plugins is not None:
        plugins.pm.hook.swiftcore_post_model_load(model=model, spec=spec, model_dir=model_dir)
    return model


def check_weight_files(model_dir: str | Path) -> None:
    """Open every ``*.safetensors`` file's header (no tensor is read), so a truncated or corrupt file is
    named before transformers fails on it with a message that names none.

    Raises:
        SwiftcoreError: a weights file cannot be opened, naming it and what to do.
    """
    from safetensors import SafetensorError, safe_open

    for path in sorted(Path(model_dir).glob("*.safetensors")):
        try:
            with safe_open(str(path), framework="numpy"):
                pass
        except (SafetensorError, OSError) as exc:
            raise SwiftcoreError(
                f"{path}: not a readable safetensors file ({exc}); it is truncated or corrupt: copy or save the "
                "checkpoint again"
            ) from None


def load_tokenizer(model_dir: str | Path, **kwargs: Any) -> Any:
    """``transformers.AutoTokenizer.from_pretrained(model_dir)`` (local files; kwargs passed on)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir), **kwargs)


def load_processor(model_dir: str | Path, **kwargs: Any) -> Any:
    """``transformers.AutoProcessor.from_pretrained(model_dir)`` for multimodal checkpoints.

    Raises:
        SwiftcoreError: the processor needs a library that is missing (typically torchvision, which
            transformers' video processors need even for image-only use; a CPU-only environment cannot
            have PyPI's CUDA build of it, see notes/vllm_cpu.md).
    """
    from transformers import AutoProcessor

    try:
        return AutoProcessor.from_pretrained(str(model_dir), **kwargs)
    except ImportError as exc:  # ModuleNotFoundError included; transformers wraps a missing backend in it
        import importlib.util

        # transformers hides the root cause ("Could not import module 'Gemma4Processor'"); torchvision
        # is the usual one, so name it when it is absent.
        missing = "torchvision" if importlib.util.find_spec("torchvision") is None else "a library"
        raise SwiftcoreError(
            f"{model_dir}: the processor needs {missing}, which is not importable here ({type(exc).__name__}: "
            f"{str(exc).strip().splitlines()[0]}). Install a torchvision build matching your torch, or use the "
            "parts that need none: AutoImageProcessor / AutoFeatureExtractor and the tokenizer"
        ) from exc
