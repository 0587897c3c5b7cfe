"""Serving a Megatron checkpoint: its Hugging Face export, made once into a cache and reused while it is unchanged.

``swiftcore infer`` / ``deploy`` / ``eval --model DIR`` offer a directory that is no Hugging Face checkpoint to the
plugins (swiftcore-infer's ``swiftcore_infer_prepare_checkpoint`` hook); this module answers for the Megatron-core
checkpoints swiftcore writes (:mod:`swiftcore_megatron.checkpoint`: ``swiftcore export --to-mcore``'s output, or the
``mcore/`` shards of ``swiftcore train --engine megatron``'s ``checkpoint-N``, at any tp/pp/ep layout) by converting
them with :func:`~swiftcore_megatron.convert.mcore_to_hf`, as ``swiftcore export --to-hf`` does; a training
checkpoint's ``swiftcore_args.json`` (the run's template and generation defaults) goes with the export, as it does
with the run's own HF export.

The export goes to ``$SWIFTCORE_CACHE_DIR/megatron-hf/NAME-KEY`` (default ``~/.cache/swiftcore``; ``KEY`` is a hash
of the checkpoint's resolved path), one per checkpoint. Its :data:`SOURCE_FILE` records a fingerprint of the
checkpoint (every file's path, size and mtime, and this distribution's version), so a later call with an unchanged
checkpoint reuses it and a changed one is exported anew. The export is written beside its final place and renamed
into it; an older export is replaced only when its :data:`SOURCE_FILE` shows swiftcore wrote it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swiftcore_megatron.checkpoint import METADATA_FILE, TRACKER_FILE, read_metadata
from swiftcore_megatron.errors import CheckpointError

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = ["CACHE_ENV", "SOURCE_FILE", "export_cache_dir", "find_mcore_root", "prepare_for_serving"]

#: The environment variable naming swiftcore's cache directory (default ``~/.cache/swiftcore``).
CACHE_ENV = "SWIFTCORE_CACHE_DIR"
#: Written into each cached export: the checkpoint it came from and its fingerprint.
SOURCE_FILE = "swiftcore_mcore_source.json"
#: Where ``swiftcore train --engine megatron`` keeps a checkpoint's shards (swiftcore_train_megatron's MCORE_SUBDIR).
_TRAIN_SUBDIR = "mcore"
_LORA_RECORD = "swiftcore_lora.json"


def find_mcore_root(path: Path) -> Path | None:
    """The Megatron checkpoint ``path`` is (or, for a training checkpoint without its HF model, holds in ``mcore/``);
    None when it is neither."""
    for root in (path, path / _TRAIN_SUBDIR):
        if (root / METADATA_FILE).is_file():
            return root
    return None


def export_cache_dir(root: Path, env: dict[str, str] | None = None) -> Path:
    """Where the HF export of the Megatron checkpoint ``root`` is cached (see the module docstring)."""
    env = dict(os.environ) if env is None else env
    base = Path(env.get(CACHE_ENV) or Path.home() / ".cache" / "swiftcore").expanduser()
    resolved = root.resolve()
    key = hashlib.sha256(str(resolved).encode()).hexdigest()[:12]
    name = resolved.parent.name if resolved.name == _TRAIN_SUBDIR else resolved.name  # checkpoint-N, not "mcore"
    return base / "megatron-hf" / f"{name}-{key}"


def _run_args(root: Path) -> Path | None:
    """The training run's ``swiftcore_args.json`` beside a ``checkpoint-N/mcore`` (its generation defaults, e.g.
    ``enable_thinking``, and template: what the engine encodes prompts with, as for the run's own HF export)."""
    from swiftcore.api.models import ARGS_FILE

    args = root.parent / ARGS_FILE
    return args if root.name == _TRAIN_SUBDIR and args.is_file() else None


def _fingerprint(root: Path, meta: dict[str, Any]) -> str:
    """A hash of every file under ``root`` and of the run's arguments (path, size, mtime), and this converter's
    version."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        own = version("swiftcore-megatron")
    except PackageNotFoundError:  # a source tree on PYTHONPATH
        own = "unknown"
    files = sorted(p for p in root.rglob("*") if p.is_file())
    args = _run_args(root)
    listing = [(str(p.relative_to(root.parent)), p.stat().st_size, p.stat().st_mtime_ns) for p in files]
    listing += [(args.name, args.stat().st_size, args.stat().st_mtime_ns)] if args else []
    text = json.dumps({"converter": own, "meta": meta, "files": listing}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _source_record(directory: Path) -> dict[str, Any] | None:
    try:
        record = json.loads((directory / SOURCE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _is_current(directory: Path, fingerprint: str) -> bool:
    record = _source_record(directory)
    return bool(record and record.get("fingerprint") == fingerprint and (directory / "config.json").is_file())


def prepare_for_serving(model_dir: str, plugins: PluginSet, echo: Callable[[str], None] = print) -> str | None:
    """The Hugging Face checkpoint serving the Megatron checkpoint ``model_dir``, exported now or reused from the
    cache; None when ``model_dir`` is no Megatron checkpoint.

    Raises:
        CheckpointError: a Megatron checkpoint swiftcore did not write (no metadata file); a rank file is missing,
            unreadable or lacks tensors the bridge maps; the checkpoint holds a LoRA adapter (its peft export is
            served instead); or the cache path holds files swiftcore did not write.
        BridgeNotFoundError: no installed bridge converts its model type.
    """
    source = Path(model_dir)
    root = find_mcore_root(source)
    where = f"--model {model_dir!r}"
    if root is None:
        trackers = [d / TRACKER_FILE for d in (source, source / _TRAIN_SUBDIR)]
        tracker = next((t for t in trackers if t.is_file()), None)
        if tracker is not None:  # Megatron-LM's own checkpoint (e.g. torch_dist): no bridge metadata to convert it with
            raise CheckpointError(
                f"{where} is a Megatron checkpoint ({tracker.relative_to(source)}) without {METADATA_FILE}, so not one "
                "swiftcore wrote: swiftcore serves what `swiftcore train --engine megatron` and `swiftcore export "
                "--to-mcore` write. Convert it to a Hugging Face checkpoint with the tool that wrote it, and pass that"
            )
        return None
    if (root / _LORA_RECORD).is_file():
        raise CheckpointError(
            f"{where} holds a LoRA adapter trained by --engine megatron, not a whole model: serve the peft adapter "
            f"its checkpoint holds (--model {str(root.parent)!r})"
        )
    try:
        meta = read_metadata(root)
    except CheckpointError as exc:
        raise CheckpointError(f"{where}: {exc}") from None
    except (ValueError, KeyError, TypeError) as exc:  # swiftcore_mcore.json is no JSON, or lacks tp/ep
        damaged = f"{root / METADATA_FILE} is damaged ({type(exc).__name__}: {exc})"
        raise CheckpointError(f"{where}: {damaged}; copy the checkpoint again") from None
    fingerprint = _fingerprint(root, meta)
    out = export_cache_dir(root)
    if _is_current(out, fingerprint):
        echo(f"megatron checkpoint {root}: reusing its HF export {out} (unchanged since it was made)")
        return str(out)
    echo(
        f"megatron checkpoint {root} (tp={meta['tp']}, pp={meta.get('pp', 1)}, ep={meta['ep']}): exporting to HF at "
        f"{out}; reused while the checkpoint is unchanged (set {CACHE_ENV} to move the cache)"
    )
    _export(root, out, plugins, fingerprint, where)
    return str(out)


def _export(root: Path, out: Path, plugins: PluginSet, fingerprint: str, where: str) -> None:
    """Export ``root`` into a directory beside ``out``, then rename it into place (replacing a stale export)."""
    from swiftcore.api import SwiftcoreError
    from swiftcore_megatron.checkpoint import HF_SUBDIR
    from swiftcore_megatron.convert import mcore_to_hf
    from swiftcore_megatron.resolve import read_hf_config, resolve_bridge

    if out.exists() and _source_record(out) is None:
        raise CheckpointError(
            f"{where}: the cache path {out} exists and swiftcore did not write it ({SOURCE_FILE} is missing); "
            f"move it away, or set {CACHE_ENV} to another directory"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        try:
            _, bridge = resolve_bridge(read_hf_config(root / HF_SUBDIR), plugins)
            mcore_to_hf(root, work / "model", bridge)
            args = _run_args(root)
            if args is not None:
                shutil.copy2(args, work / "model" / args.name)
        except SwiftcoreError as exc:
            raise CheckpointError(f"{where}: {exc}") from None
        except Exception as exc:  # a truncated or foreign rank file fails inside torch's reader or the unpickler
            raise CheckpointError(
                f"{where}: reading the Megatron checkpoint {root} failed ({type(exc).__name__}: {exc}); it may be "
                "incomplete or damaged: copy it again, or serve its HF export (swiftcore export --to-hf)"
            ) from None
        record = {"source": str(root.resolve()), "fingerprint": fingerprint}
        (work / "model" / SOURCE_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        if _is_current(out, fingerprint):  # another process finished the same export meanwhile
            return
        if out.exists():  # a stale export of ours (checked above): set aside, removed with the work directory
            os.replace(out, work / "stale")
        os.replace(work / "model", out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
