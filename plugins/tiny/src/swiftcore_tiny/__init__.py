"""Tiny random checkpoints of any installed model family, and the demo on one (distribution ``swiftcore-tiny``).

- :mod:`swiftcore_tiny.checkpoint`: :func:`make_tiny` writes a checkpoint from a model spec's ``tiny_config`` and
  ``tiny_tokenizer`` (random weights, the family's real special tokens and chat template), atomically.
- :mod:`swiftcore_tiny.tokenizer`: :func:`build_tiny_tokenizer`, which model plugins' ``tiny_tokenizer``
  functions call to write a small BPE tokenizer with their family's special tokens.
- :mod:`swiftcore_tiny.processor`: :func:`save_processor_config` for multimodal families' processor files.
- :mod:`swiftcore_tiny.family`: :class:`TinyFamily`, a family's tiny checkpoint as data (config class and numbers,
  special tokens, chat template, :class:`TinyProcessor`), with :class:`TokenId` and :data:`VOCAB` for the values
  the tokenizer decides; :mod:`swiftcore_tiny.builder`: :func:`build_tiny_family` turns one into files and a config.
- :mod:`swiftcore_tiny.command`: ``swiftcore make-tiny``; :mod:`swiftcore_tiny.demo`: ``make demo``.

Importing this package imports no torch or transformers; writing a checkpoint does.
"""

from __future__ import annotations

from swiftcore.api import lazy_exports
from swiftcore_tiny.checkpoint import TINY_LOGIT_MARGIN, TinyCheckpoint, TinyModelError, describe_checkpoint, make_tiny
from swiftcore_tiny.processor import save_processor_config
from swiftcore_tiny.tokenizer import build_tiny_tokenizer

__all__ = [
    "TINY_CORPUS",
    "TINY_LOGIT_MARGIN",
    "VOCAB",
    "TinyCheckpoint",
    "TinyFamily",
    "TinyModelError",
    "TinyProcessor",
    "TokenId",
    "build_tiny_family",
    "build_tiny_tokenizer",
    "describe_checkpoint",
    "make_tiny",
    "parity_records",
    "run_demo",
    "save_processor_config",
]

#: name -> the submodule that defines it, imported on first use (importing the package stays light).
_WHERE = {
    "TINY_CORPUS": "_corpus",
    "VOCAB": "family",
    "TinyFamily": "family",
    "TinyProcessor": "family",
    "TokenId": "family",
    "build_tiny_family": "builder",
    "parity_records": "demo",
    "run_demo": "demo",
}
__getattr__ = lazy_exports(__name__, _WHERE)
