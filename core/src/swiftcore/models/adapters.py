"""LoRA adapter directories: finding an adapter's base model, and merging an adapter into it.

One implementation serves ``swiftcore export --merge-lora``, ``swiftcore infer --merge-lora`` and the
backends that cannot apply adapters per request.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from swiftcore._atomic import atomic_output_dir, check_output_dir
from swiftcore.errors import SwiftcoreError

__all__ = ["ADAPTER_CONFIG", "base_model_dir", "merge_lora", "resolve_checkpoint"]

ADAPTER_CONFIG = "adapter_config.json"
# Files a base checkpoint carries that save_pretrained of the merged model does not write.
_CARRIED_FILES = ("preprocessor_config.json", "processor_config.json", "chat_template.jinja")


def base_model_dir(adapter_dir: str | os.PathLike[str]) -> Path:
    """The local base model directory named by ``adapter_config.json``'s ``base_model_name_or_path``.

    A relative path is taken relative to the current directory, then to the adapter directory.

    Raises:
        SwiftcoreError: no adapter_config.json, no base path, or a base that is not a local model directory.
    """
    adapter = Path(adapter_dir)
    config_file = adapter / ADAPTER_CONFIG
    if not config_file.is_file():
        raise SwiftcoreError(f"{config_file} not found: expected a peft adapter directory")
    base = json.loads(config_file.read_text(encoding="utf-8")).get("base_model_name_or_path")
    if not base:
        raise SwiftcoreError(f"{config_file}: field 'base_model_name_or_path' is empty; set it to the base model dir")
    for candidate in (Path(base).expanduser(), adapter / base):
        if (candidate / "config.json").is_file():
            return candidate.resolve()
    raise SwiftcoreError(
        f"{config_file}: base_model_name_or_path={base!r} is not a local model directory (no config.json there); "
        "point the field at a local copy of the base model, or pass the base with --model and this directory "
        "with --adapter"
    )


def resolve_checkpoint(model_dir: str | Path, adapter: str | Path | None = None) -> tuple[Path, Path | None]:
    """Split a directory into ``(base model, adapter)``.

    A peft adapter directory given as the model points at its base through ``base_model_name_or_path``.

    Args:
        model_dir: a checkpoint or adapter directory.
        adapter: an explicit adapter directory (then ``model_dir`` is the base).

    Raises:
        SwiftcoreError: a directory does not exist, or an adapter's base model is not a local directory.
    """
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise SwiftcoreError(f"model directory {str(model_dir)!r} does not exist; pass a local checkpoint to --model")
    if adapter is not None and not Path(adapter).is_dir():
        raise SwiftcoreError(f"adapter directory {str(adapter)!r} does not exist; pass a peft adapter to --adapter")
    if adapter is None and (model_dir / ADAPTER_CONFIG).exists():
        return base_model_dir(model_dir), model_dir
    return model_dir, Path(adapter) if adapter else None


def _load_base(base: Path, plugins: Any, dtype: str) -> tuple[Any, str | None]:
    """The base model through its swiftcore spec (plugin hooks apply); plain transformers if none claims it."""
    from swiftcore.models.errors import UnknownModelTypeError
    from swiftcore.models.loading import load_model
    from swiftcore.models.resolve import resolve_model_spec

    try:
        spec = resolve_model_spec(str(base), plugins)
    except UnknownModelTypeError:
        import transformers

        config = json.loads((base / "config.json").read_text(encoding="utf-8"))
        cls = next(
            (getattr(transformers, a) for a in config.get("architectures") or () if hasattr(transformers, a)),
            transformers.AutoModelForCausalLM,
        )
        return cls.from_pretrained(str(base), dtype=dtype), None
    return load_model(spec, str(base), plugins, torch_dtype=dtype), spec.name


def merge_lora(
    model_dir: str | Path,
    out_dir: str | Path,
    plugins: Any,
    *,
    adapter: str | Path | None = None,
    dtype: str = "auto",
) -> Path:
    """Merge a LoRA adapter into its base with peft ``merge_and_unload``; write model and tokenizer atomically.

    Args:
        model_dir: an adapter directory that names its base, or the base (then pass ``adapter``).
        out_dir: where to write the merged checkpoint (must not exist, or be empty).
        plugins: the loaded plugins (the base is loaded through its model spec when one claims it).
        adapter: the adapter directory, when ``model_dir`` is the base.
        dtype: ``auto`` keeps the saved dtype; or ``float32`` / ``bfloat16`` / ``float16``.

    Returns:
        The finished output directory.
    """
    from peft import PeftModel

    check_output_dir(out_dir)
    base, adapter_dir = resolve_checkpoint(model_dir, adapter)
    if adapter_dir is None:
        raise SwiftcoreError(f"{model_dir}: no LoRA adapter to merge (pass an adapter directory, or --adapter)")
    model, spec_name = _load_base(base, plugins, dtype)
    merged = PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
    with atomic_output_dir(out_dir) as tmp:
        merged.save_pretrained(tmp)
        tokenizer_dir = adapter_dir if (adapter_dir / "tokenizer_config.json").is_file() else base
        if (tokenizer_dir / "tokenizer_config.json").is_file():
            from transformers import AutoTokenizer

            AutoTokenizer.from_pretrained(str(tokenizer_dir)).save_pretrained(tmp)
        if spec_name:  # the merged checkpoint resolves to the same spec as its base
            from swiftcore.models.resolve import ARGS_FILE

            (tmp / ARGS_FILE).write_text(json.dumps({"model_type": spec_name}) + "\n")
        for name in _CARRIED_FILES:
            if (base / name).exists() and not (tmp / name).exists():
                (tmp / name).write_bytes((base / name).read_bytes())
    return Path(out_dir).expanduser().resolve()
