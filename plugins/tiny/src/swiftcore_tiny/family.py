"""A tiny model family described as data: what a model plugin's ``tiny.py`` declares.

A family's tiny checkpoint differs from another's in data only -- the config class and its (small) numbers, the
special tokens and which of them are ids in the config, the tokenizer layout, the official chat template, the
processor parts -- so a plugin describes it with a :class:`TinyFamily` and :mod:`swiftcore_tiny.builder` turns that
into files and a config. What really needs code (a processor that must be built with the tokenizer, a config that
no class's keywords can express) is a hook: ``processor`` may be a function, ``config_class`` may be one.

A model plugin builds its description on call (a function in its ``tiny.py``), not at import: swiftcore-tiny is
its ``[tiny]`` extra, and the spec's ``tiny_config`` / ``tiny_tokenizer`` references must resolve without it. So
the description holds the objects themselves (the config class, transformers' split regex, the sub-processors),
imported where it is built, rather than lazy references.

Inside ``config``, :class:`TokenId` stands for a special token's id and :data:`VOCAB` for the vocabulary size, both
taken from the tokenizer just written (or, without one, from the builder's layout: specials first, in order, and
``vocab_size``), so the config always matches its tokenizer.

Importing this module imports no torch, transformers or tokenizers; building does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from swiftcore.api import SwiftcoreError
from swiftcore_tiny.tokenizer import DEFAULT_TOKENIZER_CLASS

__all__ = ["VOCAB", "TinyFamily", "TinyProcessor", "TokenId"]


@dataclass(frozen=True)
class TokenId:
    """In a :class:`TinyFamily` config: the id of ``token``, one of the family's ``special_tokens``."""

    token: str


class _Vocab:
    """The type of :data:`VOCAB` (one instance, so that ``is`` finds it)."""

    def __repr__(self) -> str:
        return "VOCAB"


#: In a :class:`TinyFamily` config: the vocabulary size (``len(tokenizer)``, else the family's ``vocab_size``).
VOCAB = _Vocab()


@dataclass(frozen=True)
class TinyProcessor:
    """A multimodal processor's settings, saved as ``processor_config.json`` (see :mod:`swiftcore_tiny.processor`).

    Attributes:
        processor_class: the transformers processor class the file names, e.g. ``"Qwen3VLProcessor"``.
        parts: attribute name -> sub-processor, e.g. ``{"image_processor": Qwen2VLImageProcessorPil(patch_size=16)}``.
        settings: the processor's own settings (e.g. ``{"image_seq_length": 280}``).
    """

    processor_class: str
    parts: Mapping[str, Any]
    settings: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _freeze(self, "parts", "settings")


@dataclass(frozen=True)
class TinyFamily:
    """Everything that makes one family's tiny checkpoint, as data (see the module docstring).

    The tokenizer fields are :func:`~swiftcore_tiny.build_tiny_tokenizer`'s arguments of the same names.

    Attributes:
        config_class: the config class, e.g. ``transformers.OlmoeConfig``; it is called with ``config``'s
            keywords, so a function of the plugin's may stand in where the config needs code.
        config: the config's keyword arguments (nested dicts for sub-configs), with :class:`TokenId` and
            :data:`VOCAB` where the tokenizer decides the value.
        special_tokens: the family's special and control tokens, ids ``0..n-1`` in this order.
        eos, pad, bos, unk: those tokens (``pad`` defaults to ``eos``; the others to none).
        non_special: tokens of ``special_tokens`` that decoding keeps, as in the released tokenizer.
        named_tokens: attribute name -> token, for processors that read them from the tokenizer.
        chat_template: ``"package:path/in/package"`` of the official Jinja chat template (read with
            ``importlib.resources``), or None for a family that releases none.
        style: the tokenizer layout (:data:`swiftcore_tiny.tokenizer.STYLES`).
        split_regex: the split regex (``style="split_bytelevel"``), best transformers' own for
            ``tokenizer_class``, so the layout cannot drift from the class that rebuilds it.
        tokenizer_class: the transformers tokenizer class saved with the tokenizer.
        vocab_size: the vocabulary size to aim for (the real one is ``len(tokenizer)``).
        add_bos_token: whether encoding prepends ``bos``.
        corpus: the BPE training text (None: the built-in tiny corpus).
        processor: a :class:`TinyProcessor`, or a hook ``fn(out_dir, tokenizer) -> None`` for a processor that
            needs code; None for a text-only family.
    """

    config_class: Callable[..., Any]
    config: Mapping[str, Any]
    special_tokens: tuple[str, ...]
    eos: str
    pad: str | None = None
    bos: str | None = None
    unk: str | None = None
    non_special: tuple[str, ...] = ()
    named_tokens: Mapping[str, str] = field(default_factory=dict)
    chat_template: str | None = None
    style: str = "bytelevel"
    split_regex: str | None = None
    tokenizer_class: str = DEFAULT_TOKENIZER_CLASS
    vocab_size: int = 512
    add_bos_token: bool = False
    corpus: tuple[str, ...] | None = None
    processor: TinyProcessor | Callable[[Path, Any], None] | None = None

    def __post_init__(self) -> None:
        _freeze(self, "config", "named_tokens")
        for name in ("special_tokens", "non_special", "corpus"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, tuple(getattr(self, name)))
        # A misspelt token would otherwise surface only as a KeyError while a checkpoint is being written.
        unknown = sorted({t.token for t in _token_ids(self.config)} - set(self.special_tokens))
        if unknown:
            raise SwiftcoreError(f"tiny family {self.name}: config names {unknown} not in special_tokens")

    @property
    def name(self) -> str:
        """The config class's name, which names the family in messages."""
        return getattr(self.config_class, "__name__", repr(self.config_class))

    def write_tokenizer(self, out_dir: str | Path) -> Any:
        """Write the tokenizer (and processor files) to ``out_dir``; the saved tokenizer, reloaded.

        Args:
            out_dir: the checkpoint directory being written.
        """
        from swiftcore_tiny.builder import write_family_tokenizer

        return write_family_tokenizer(self, out_dir)

    def make_config(self, tokenizer: Any = None) -> Any:
        """The config, its vocabulary size and token ids taken from ``tokenizer``.

        Args:
            tokenizer: the tiny tokenizer; None uses the builder's layout (specials first, in order).
        """
        from swiftcore_tiny.builder import family_config

        return family_config(self, tokenizer)


def _freeze(obj: Any, *names: str) -> None:
    """Copy the mapping fields ``names`` into read-only views, so a frozen description stays as declared."""
    for name in names:
        object.__setattr__(obj, name, MappingProxyType(dict(getattr(obj, name))))


def _token_ids(value: Any) -> Iterator[TokenId]:
    """Every :class:`TokenId` inside ``value`` (mappings and sequences, nested)."""
    if isinstance(value, TokenId):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _token_ids(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _token_ids(item)
