"""Write tiny random checkpoints of a model family (tests, the demo, ``swiftcore make-tiny``).

A plugin's :class:`~swiftcore.specs.ModelSpec` names two factories:

* ``tiny_tokenizer``: ``fn(out_dir) -> None`` writes the tokenizer (with the family's special tokens
  and official chat template) and, for multimodal families, the processor files;
* ``tiny_config``: ``fn(tokenizer=None) -> PretrainedConfig`` returns a tiny config; when it takes
  ``tokenizer``, it gets the tokenizer just written, so that ``vocab_size`` and the special-token ids
  in the config match it.

The checkpoint is written into a temporary sibling directory and renamed at the end, so
``out_dir`` never holds a half-written checkpoint.
"""

from __future__ import annotations

import inspect
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swiftcore._lazy import resolve
from swiftcore.models.errors import TinyModelError
from swiftcore.models.requirements import check_requirements

__all__ = ["TinyCheckpoint", "describe_checkpoint", "make_tiny"]

logger = logging.getLogger("swiftcore.models")


@dataclass(frozen=True)
class TinyCheckpoint:
    """What a checkpoint directory holds.

    Attributes:
        path: the directory.
        parameters: the number of parameters in its safetensors files.
        files: the file names, sorted.
    """

    path: Path
    parameters: int
    files: tuple[str, ...]


def describe_checkpoint(path: str | Path) -> TinyCheckpoint:
    """Count the parameters (from safetensors headers, without loading tensors) and list the files."""
    from safetensors import safe_open

    directory = Path(path)
    total = 0
    for file in sorted(directory.glob("*.safetensors")):
        with safe_open(str(file), framework="numpy") as handle:
            for key in handle.keys():
                count = 1
                for dim in handle.get_slice(key).get_shape():
                    count *= dim
                total += count
    files = tuple(sorted(p.name for p in directory.iterdir() if p.is_file()))
    return TinyCheckpoint(directory, total, files)


def make_tiny(spec: Any, out_dir: str | Path, seed: int = 0, *, overwrite: bool = False) -> Path:
    """Write a random tiny checkpoint of ``spec`` (weights, config, tokenizer, processor) to ``out_dir``.

    Args:
        spec: the :class:`~swiftcore.specs.ModelSpec`; it must name ``tiny_config``.
        out_dir: the directory to create; its parent is created if missing.
        seed: the random seed for the weights.
        overwrite: replace an existing non-empty ``out_dir`` (otherwise that is an error).

    Returns:
        ``out_dir`` as a :class:`~pathlib.Path`.

    Raises:
        TinyModelError: the spec has no ``tiny_config``, or ``out_dir`` is a file or a non-empty
            directory and ``overwrite`` is False.
        RequirementsError: ``spec.requires`` are not met.
    """
    if not spec.tiny_config:
        raise TinyModelError(
            f"model {spec.name!r} ({spec.provider}) declares no tiny_config, so it cannot be made tiny; "
            "ask the plugin's authors to add one (a 'module:fn' returning a small config)"
        )
    check_requirements(spec)
    out = Path(out_dir).absolute()
    _check_target(out, overwrite)
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        _write(spec, work, seed)
        _replace(work, out, overwrite)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    logger.info("make-tiny: wrote %s model %r to %s", spec.provider, spec.name, out)
    return out


def _check_target(out: Path, overwrite: bool) -> None:
    if out.is_file():
        raise TinyModelError(f"{out} is a file; choose a directory path for the tiny checkpoint")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise TinyModelError(f"{out} exists and is not empty; choose another directory or pass --force to replace it")


def _replace(work: Path, out: Path, overwrite: bool) -> None:
    """Move the finished checkpoint into place; an old one is removed only after the rename."""
    old = None
    if out.exists():
        _check_target(out, overwrite)  # it may have been filled while we worked
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.replace(out, old)
    os.replace(work, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _write(spec: Any, work: Path, seed: int) -> None:
    import torch

    tokenizer = None
    if spec.tiny_tokenizer:
        resolve(spec.tiny_tokenizer, what=f"tiny_tokenizer of model {spec.name!r} ({spec.provider})")(work)
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(work))
    factory = resolve(spec.tiny_config, what=f"tiny_config of model {spec.name!r} ({spec.provider})")
    takes_tokenizer = "tokenizer" in inspect.signature(factory).parameters
    config = factory(tokenizer=tokenizer) if takes_tokenizer else factory()
    if tokenizer is not None and getattr(config, "get_text_config", None):
        vocab = config.get_text_config().vocab_size
        if vocab < len(tokenizer):
            raise TinyModelError(
                f"tiny_config of model {spec.name!r} ({spec.provider}): vocab_size {vocab} is smaller than its "
                f"tiny tokenizer ({len(tokenizer)} tokens); take vocab_size from the tokenizer"
            )

    from swiftcore.models.loading import model_class_for

    cls = model_class_for(spec) if spec.model_class else _auto_class()
    # Seed inside a forked RNG: the weights are reproducible and the caller's RNG state is untouched.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = cls(config) if spec.model_class else cls.from_config(config)
    model = model.to(torch.float32)
    if tokenizer is not None and getattr(model, "generation_config", None) is not None:
        # generate() should stop at the tokenizer's EOS and pad with its pad token.
        gen = model.generation_config
        gen.eos_token_id = _first_not_none(config, "eos_token_id", tokenizer.eos_token_id)
        gen.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else gen.pad_token_id
        gen.bos_token_id = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else gen.bos_token_id
    model.save_pretrained(str(work))


def _first_not_none(config: Any, attribute: str, fallback: Any) -> Any:
    for cfg in (config, config.get_text_config() if hasattr(config, "get_text_config") else None):
        value = getattr(cfg, attribute, None) if cfg is not None else None
        if value is not None:
            return value
    return fallback


def _auto_class() -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM
