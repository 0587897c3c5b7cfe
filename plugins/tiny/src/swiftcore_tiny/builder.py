"""Turn a :class:`~swiftcore_tiny.family.TinyFamily` into a tokenizer on disk and a config.

:func:`build_tiny_family` does both; a model plugin's ``tiny_tokenizer`` and ``tiny_config`` (the
:class:`~swiftcore.api.ModelSpec` contract, which ``make_tiny`` calls one after the other with a reload between)
call the halves, :meth:`TinyFamily.write_tokenizer` and :meth:`TinyFamily.make_config`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from swiftcore.api import SwiftcoreError
from swiftcore_tiny.family import VOCAB, TinyFamily, TinyProcessor, TokenId
from swiftcore_tiny.processor import save_processor_config
from swiftcore_tiny.tokenizer import build_tiny_tokenizer

__all__ = ["build_tiny_family", "family_config", "write_family_tokenizer"]

#: The TinyFamily fields that are not build_tiny_tokenizer's arguments of the same name (chat_template is read first).
_NOT_TOKENIZER = frozenset({"config_class", "config", "chat_template", "processor"})


def build_tiny_family(family: TinyFamily, out_dir: str | Path) -> tuple[Any, Any]:
    """Write ``family``'s tokenizer (and processor files) to ``out_dir`` and make the config that matches it.

    Args:
        family: the description.
        out_dir: the directory for the tokenizer files; created if missing.

    Returns:
        ``(config, tokenizer)``: the transformers config and the saved tokenizer, reloaded.
    """
    tokenizer = write_family_tokenizer(family, out_dir)
    return family_config(family, tokenizer), tokenizer


def write_family_tokenizer(family: TinyFamily, out_dir: str | Path) -> Any:
    """Write ``family``'s tokenizer, then its processor files, to ``out_dir``; the saved tokenizer, reloaded.

    Args:
        family: the description.
        out_dir: the checkpoint directory being written.
    """
    template = _read_resource(family.chat_template, family) if family.chat_template else None
    arguments = {f.name: getattr(family, f.name) for f in dataclasses.fields(family) if f.name not in _NOT_TOKENIZER}
    tokenizer = build_tiny_tokenizer(out_dir, chat_template=template, **arguments)
    if isinstance(family.processor, TinyProcessor):
        processor = family.processor
        save_processor_config(out_dir, processor.processor_class, processor.parts, **processor.settings)
    elif family.processor is not None:
        family.processor(Path(out_dir), tokenizer)
    return tokenizer


def family_config(family: TinyFamily, tokenizer: Any = None) -> Any:
    """``family``'s config, with its :class:`TokenId` and :data:`VOCAB` values taken from ``tokenizer``.

    Args:
        family: the description.
        tokenizer: the tiny tokenizer; None uses the builder's layout (specials first, in order, and the
            family's ``vocab_size``), which is what the tokenizer will have.
    """
    if tokenizer is None:
        ids = {token: i for i, token in enumerate(family.special_tokens)}
        vocab = family.vocab_size
    else:
        ids = {token: tokenizer.convert_tokens_to_ids(token) for token in family.special_tokens}
        vocab = len(tokenizer)
    return family.config_class(**_fill(family.config, ids, vocab))


def _fill(value: Any, ids: Mapping[str, int], vocab: int) -> Any:
    """``value`` with placeholders replaced; mappings and lists are copied, so the config owns what it gets."""
    if isinstance(value, TokenId):
        return ids[value.token]
    if value is VOCAB:
        return vocab
    if isinstance(value, Mapping):
        return {key: _fill(item, ids, vocab) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_fill(item, ids, vocab) for item in value)
    return value


def _read_resource(reference: str, family: TinyFamily) -> str:
    """The text of ``"package:path/in/package"`` (a plugin's packaged file, e.g. its official chat template)."""
    package, sep, path = reference.partition(":")
    if not (package and sep and path):
        raise SwiftcoreError(
            f"tiny family {family.name}: chat_template {reference!r} is not a 'package:path/in/package' reference"
        )
    return resources.files(package).joinpath(*path.split("/")).read_text(encoding="utf-8")
