"""Merge a peft LoRA adapter into its base model and save a plain ``save_pretrained`` checkpoint.

Not Megatron-specific; it lives beside the other ``swiftcore export`` conversions.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from swiftcore.megatron.atomic import atomic_output_dir, check_output_dir
from swiftcore.megatron.errors import CheckpointError

__all__ = ["base_model_dir", "merge_lora"]


def base_model_dir(adapter_dir: str | os.PathLike[str]) -> Path:
    """The local base model directory named by ``adapter_config.json``'s ``base_model_name_or_path``.

    A relative path is taken relative to the current directory, then to the adapter directory.

    Raises:
        CheckpointError: no adapter_config.json, no base path, or a base that is not a local directory.
    """
    adapter = Path(adapter_dir)
    config_file = adapter / "adapter_config.json"
    if not config_file.is_file():
        raise CheckpointError(f"{config_file} not found: --merge-lora expects a peft adapter directory")
    config = json.loads(config_file.read_text(encoding="utf-8"))
    base = config.get("base_model_name_or_path")
    if not base:
        raise CheckpointError(f"{config_file}: field 'base_model_name_or_path' is empty; set it to the base model dir")
    for candidate in (Path(base).expanduser(), adapter / base):
        if (candidate / "config.json").is_file():
            return candidate.resolve()
    raise CheckpointError(
        f"{config_file}: base_model_name_or_path={base!r} is not a local model directory (no config.json there); "
        "download the base model and point the field at it"
    )


def merge_lora(adapter_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str]) -> Path:
    """Merge the adapter into its base with peft ``merge_and_unload`` and save model and tokenizer atomically.

    The base is loaded in its saved dtype with the class its ``architectures`` names (so multimodal
    models keep their towers).

    Args:
        adapter_dir: a peft adapter directory (adapter_config.json + adapter weights).
        out_dir: where to write the merged checkpoint (must not exist, or be empty).

    Returns:
        The finished output directory.
    """
    check_output_dir(out_dir)
    base = base_model_dir(adapter_dir)
    from peft import PeftModel

    from swiftcore.megatron.parity import hf_model_class

    config = json.loads((base / "config.json").read_text(encoding="utf-8"))
    model = hf_model_class(config).from_pretrained(base, dtype="auto")
    merged = PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
    with atomic_output_dir(out_dir) as tmp:
        merged.save_pretrained(tmp)
        tokenizer_source = Path(adapter_dir) if (Path(adapter_dir) / "tokenizer_config.json").is_file() else base
        if (tokenizer_source / "tokenizer_config.json").is_file():
            from transformers import AutoTokenizer

            AutoTokenizer.from_pretrained(tokenizer_source).save_pretrained(tmp)
    return Path(out_dir).expanduser().resolve()
