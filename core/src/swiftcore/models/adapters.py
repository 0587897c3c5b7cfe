"""LoRA adapter directories: finding the base model an adapter names, and splitting a checkpoint argument into
base and adapter, the same for ``infer``, ``deploy`` and ``export --merge-lora`` (the merge itself is
``swiftcore-infer``'s: ``swiftcore_infer.merge``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from swiftcore.errors import SwiftcoreError

__all__ = ["ADAPTER_CONFIG", "base_model_dir", "resolve_checkpoint"]

ADAPTER_CONFIG = "adapter_config.json"
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
