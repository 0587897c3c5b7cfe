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
#: The advice every "cannot find the base" error ends with: the flags infer, deploy and export all take.
_NAME_BASE = "pass the base with --model BASE and this directory with --adapter DIR"


def base_model_dir(adapter_dir: str | os.PathLike[str]) -> Path:
    """The local base model directory named by ``adapter_config.json``'s ``base_model_name_or_path``.

    ``swiftcore train`` stores an absolute path. A relative one (adapters saved before that, or by other
    tools) is taken relative to the current directory, then to the adapter directory.

    Raises:
        SwiftcoreError: no adapter_config.json, no base path, or a base that is not a local model directory.
    """
    adapter = Path(adapter_dir)
    config_file = adapter / ADAPTER_CONFIG
    if not config_file.is_file():
        raise SwiftcoreError(f"{config_file} not found: expected a peft adapter directory")
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise SwiftcoreError(f"{config_file} is not valid JSON ({exc}); re-save the adapter") from exc
    base = config.get("base_model_name_or_path") if isinstance(config, dict) else None
    if not base:
        raise SwiftcoreError(
            f"{config_file}: field 'base_model_name_or_path' is empty; set it to the base model dir, or {_NAME_BASE}"
        )
    for candidate in (Path(base).expanduser(), adapter / base):
        if (candidate / "config.json").is_file():
            return candidate.resolve()
    where = "" if Path(base).is_absolute() else " (looked for from the current directory and from the adapter's)"
    raise SwiftcoreError(
        f"{config_file}: base_model_name_or_path={base!r} is not a local model directory{where}, no config.json "
        f"there; point the field at a local copy of the base model, or {_NAME_BASE}"
    )


def resolve_checkpoint(model_dir: str | Path, adapter: str | Path | None = None) -> tuple[Path, Path | None]:
    """Split a directory into ``(base model, adapter)``.

    A peft adapter directory given as the model points at its base through ``base_model_name_or_path``;
    with an explicit ``adapter``, ``model_dir`` is the base (whatever the adapter names), the same for
    ``infer``, ``deploy`` and ``export --merge-lora`` (``--model BASE --adapter DIR``).

    Args:
        model_dir: a checkpoint or adapter directory.
        adapter: an explicit adapter directory (then ``model_dir`` is the base).

    Raises:
        SwiftcoreError: a directory does not exist, an adapter's base model is not a local directory,
            or ``--adapter`` is given with an adapter (not a base model) as ``--model``.
    """
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise SwiftcoreError(f"model directory {str(model_dir)!r} does not exist; pass a local checkpoint to --model")
    if adapter is None:
        if (model_dir / ADAPTER_CONFIG).exists():
            return base_model_dir(model_dir), model_dir
        return model_dir, None
    adapter = Path(adapter)
    if not adapter.is_dir():
        raise SwiftcoreError(f"adapter directory {str(adapter)!r} does not exist; pass a peft adapter to --adapter")
    if not (adapter / ADAPTER_CONFIG).is_file():
        raise SwiftcoreError(
            f"--adapter {str(adapter)!r}: no {ADAPTER_CONFIG} there; pass a peft LoRA adapter directory"
        )
    if (model_dir / ADAPTER_CONFIG).exists():
        # Loading an adapter as the base would fail deep in transformers with no hint of the mix-up.
        raise SwiftcoreError(
            f"--model {str(model_dir)!r} is itself a LoRA adapter; with --adapter, --model must be the base model"
        )
    return model_dir, adapter


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
    from swiftcore.models.manifest import read_manifest, warn_mismatches

    # The adapter's manifest travels to the merged model (below); say now if it was trained with other plugins.
    warn_mismatches(read_manifest(adapter_dir), plugins)
    model, spec_name = _load_base(base, plugins, dtype)
    merged = PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
    with atomic_output_dir(out_dir) as tmp:
        merged.save_pretrained(tmp)
        tokenizer_dir = adapter_dir if (adapter_dir / "tokenizer_config.json").is_file() else base
        if (tokenizer_dir / "tokenizer_config.json").is_file():
            from transformers import AutoTokenizer

            AutoTokenizer.from_pretrained(str(tokenizer_dir)).save_pretrained(tmp)
        from swiftcore.models.resolve import ARGS_FILE

        # The adapter's training record (its manifest: template, generation defaults ...) describes the merged
        # model too, so infer and deploy serve it with the adapter's template; it must resolve to the same spec
        # as its base.
        record = _read_json(adapter_dir / ARGS_FILE)
        if spec_name:
            record["model_type"] = spec_name
        if record:
            (tmp / ARGS_FILE).write_text(json.dumps(record, indent=2) + "\n")
        for name in _CARRIED_FILES:
            if (base / name).exists() and not (tmp / name).exists():
                (tmp / name).write_bytes((base / name).read_bytes())
    return Path(out_dir).expanduser().resolve()


def _read_json(path: Path) -> dict[str, Any]:
    """A JSON object file's content; {} when it is missing or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
