"""Merge a LoRA adapter into its base model: ``swiftcore export --merge-lora`` (through the core's
``swiftcore_export_checkpoint`` hook, target ``"merged"``), ``swiftcore infer --merge-lora`` and the backends that
cannot apply adapters per request (vLLM, SGLang)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swiftcore.api import SwiftcoreError
from swiftcore.api.models import (
    ARGS_FILE,
    UnknownModelTypeError,
    atomic_output_dir,
    check_output_dir,
    load_model,
    read_manifest,
    resolve_checkpoint,
    resolve_model_spec,
    warn_mismatches,
)

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = ["merge_lora"]

# Files a base checkpoint carries that save_pretrained of the merged model does not write.
_CARRIED_FILES = ("preprocessor_config.json", "processor_config.json", "chat_template.jinja")


def _load_base(base: Path, plugins: PluginSet, dtype: str) -> tuple[Any, str | None]:
    """The base model through its swiftcore spec (plugin hooks apply); plain transformers if none claims it."""
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
    plugins: PluginSet,
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
