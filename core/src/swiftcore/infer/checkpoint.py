"""Where a model lives: base checkpoint vs LoRA adapter directories, and merging an adapter in."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from swiftcore.errors import SwiftcoreError

__all__ = ["merge_lora", "resolve_checkpoint"]


def resolve_checkpoint(model_dir: str | Path, adapter: str | Path | None = None) -> tuple[Path, Path | None]:
    """Split a directory into ``(base model, adapter)``.

    A peft adapter directory (it has ``adapter_config.json``) given as the model points at its base
    model through ``base_model_name_or_path``.

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
    config = model_dir / "adapter_config.json"
    if adapter is None and config.exists():
        base = json.loads(config.read_text()).get("base_model_name_or_path")
        if not base or not Path(base).is_dir():
            raise SwiftcoreError(
                f"{config}: base_model_name_or_path {base!r} is not a local directory; pass the base model with "
                "--model and this directory with --adapter"
            )
        return Path(base), model_dir
    return model_dir, Path(adapter) if adapter else None


def merge_lora(
    model_dir: str | Path, adapter: str | Path | None, out_dir: str | Path, plugins: Any, *, dtype: str = "float32"
) -> Path:
    """Merge a LoRA adapter into its base model and save a plain checkpoint (for backends without LoRA).

    Args:
        model_dir: the base model, or an adapter directory that names its base.
        adapter: the adapter directory (None when ``model_dir`` is the adapter).
        out_dir: where to save the merged checkpoint (config, weights, tokenizer, swiftcore args).
        plugins: the loaded plugins.
        dtype: the dtype to load and save in.

    Returns:
        ``out_dir``.
    """
    from peft import PeftModel

    from swiftcore.models import ARGS_FILE, load_model, load_tokenizer, resolve_model_spec

    base, adapter_dir = resolve_checkpoint(model_dir, adapter)
    if adapter_dir is None:
        raise SwiftcoreError(f"{model_dir}: no LoRA adapter to merge (pass --adapter or an adapter directory)")
    spec = resolve_model_spec(str(base), plugins)
    model = PeftModel.from_pretrained(load_model(spec, str(base), plugins, torch_dtype=dtype), str(adapter_dir))
    merged = model.merge_and_unload()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    merged.save_pretrained(str(out))
    tokenizer_dir = adapter_dir if (adapter_dir / "tokenizer_config.json").exists() else base
    load_tokenizer(str(tokenizer_dir)).save_pretrained(str(out))
    # Record the spec so the merged checkpoint resolves the same way as its base.
    (out / ARGS_FILE).write_text(json.dumps({"model_type": spec.name}) + "\n")
    for extra in ("preprocessor_config.json", "processor_config.json", "chat_template.jinja"):
        if (base / extra).exists() and not (out / extra).exists():
            (out / extra).write_bytes((base / extra).read_bytes())
    return out
