"""Build small, real tokenizers for tiny test checkpoints.

A tiny tokenizer is a BPE trained (with the ``tokenizers`` library) on a small built-in text, laid out
exactly like its family's real tokenizer, so that the class ``AutoTokenizer`` picks for the family
(which may rebuild the normalizer and pre-tokenizer from vocab and merges, as ``Qwen3_5Tokenizer``
and ``GemmaTokenizer`` do) gives the same ids as the raw ``tokenizers.Tokenizer``. The family's
special tokens come first, in the order given, so their ids are small and stable.

The core knows layouts, not families: the family's plugin (its ``tiny.py``) picks the layout and passes
what is its own -- the tokenizer class its checkpoints name and, for a split layout, the split regex
(best taken from transformers' module for that class, so the layout cannot drift from what it rebuilds).

Styles:

* ``"bytelevel"``: a plain GPT-2 style byte-level BPE (ByteLevel's own regex).
* ``"split_bytelevel"``: NFC, then the caller's ``split_regex`` (isolated), then byte-level without
  regex, no unk -- the layout of the Qwen2/Qwen3/Qwen3.5 tokenizers, for one.
* ``"byte_fallback"``: spaces become ``▁``, split after spaces, BPE with byte fallback to ``<0xNN>``
  (ids: specials, the 256 bytes, pieces) -- Gemma's layout, for one; needs an unk token.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from swiftcore.api import SwiftcoreError

__all__ = ["DEFAULT_TOKENIZER_CLASS", "STYLES", "build_tiny_tokenizer"]

STYLES = ("bytelevel", "split_bytelevel", "byte_fallback")

# Characters the byte_fallback style learns as pieces; rarer ones are spelled with byte-fallback tokens.
_FALLBACK_ALPHABET = 96

#: The tokenizer class saved when the caller names none: loads the saved layout as-is.
DEFAULT_TOKENIZER_CLASS = "TokenizersBackend"


def build_tiny_tokenizer(
    out_dir: str | Path,
    *,
    special_tokens: Sequence[str],
    eos: str,
    pad: str | None = None,
    bos: str | None = None,
    unk: str | None = None,
    non_special: Iterable[str] = (),
    named_tokens: Mapping[str, str] | None = None,
    chat_template: str | None = None,
    style: str = "bytelevel",
    split_regex: str | None = None,
    tokenizer_class: str = DEFAULT_TOKENIZER_CLASS,
    vocab_size: int = 512,
    add_bos_token: bool = False,
    model_max_length: int = 4096,
    corpus: Iterable[str] | None = None,
) -> Any:
    """Train a tiny BPE tokenizer with the family's real special tokens and save it to ``out_dir``.

    Args:
        out_dir: directory to write ``tokenizer.json``, ``tokenizer_config.json`` (and the chat
            template) into; created if missing.
        special_tokens: the family's special and control tokens, given ids ``0..n-1`` in this order.
        eos: the end-of-sequence token (must be in ``special_tokens``).
        pad: the padding token (default: ``eos``).
        bos: the beginning-of-sequence token, if the family has one.
        unk: the unknown token (``byte_fallback`` style needs one; byte-level styles have none).
        non_special: tokens of ``special_tokens`` that decoding keeps (e.g. ``<think>``), as in the
            family's real tokenizer.
        named_tokens: attribute name -> token, saved as ``extra_special_tokens`` so that processors
            find them (e.g. ``{"image_token": "<|image_pad|>"}``).
        chat_template: the official Jinja chat template, saved with the tokenizer.
        style: one of :data:`STYLES` (see the module docstring).
        split_regex: the pre-tokenizer split regex (``split_bytelevel`` only, and required there).
        tokenizer_class: the transformers tokenizer class saved in ``tokenizer_config.json``, the one
            ``AutoTokenizer`` builds and whose rebuild rules ``style`` must match.
        vocab_size: the total vocabulary size to aim for; the real size is ``len(tokenizer)``.
        add_bos_token: whether encoding prepends ``bos``.
        model_max_length: saved as the tokenizer's maximum length.
        corpus: training text (default: the built-in tiny corpus).

    Returns:
        The saved tokenizer, reloaded with ``transformers.AutoTokenizer`` from ``out_dir``.

    Raises:
        SwiftcoreError: an unknown style, a missing or stray ``split_regex``, a named token missing from
            ``special_tokens``, or a vocabulary too small for the byte alphabet.
    """
    from tokenizers import Tokenizer

    if style not in STYLES:
        raise SwiftcoreError(f"tiny tokenizer: unknown style {style!r}; use one of {', '.join(STYLES)}")
    if (style == "split_bytelevel") != (split_regex is not None):
        raise SwiftcoreError("tiny tokenizer: split_regex is required by style 'split_bytelevel' and only by it")
    specials = list(dict.fromkeys(special_tokens))
    pad = pad or eos
    named = dict(named_tokens or {})
    wanted = {"eos": eos, "pad": pad, "bos": bos, "unk": unk, **named}
    missing = sorted(f"{k}={v!r}" for k, v in wanted.items() if v is not None and v not in specials)
    if missing:
        raise SwiftcoreError(f"tiny tokenizer: {', '.join(missing)} not in special_tokens; add them to the list")
    # Room for the specials, the 256 bytes (and, for byte_fallback, its learned alphabet) plus some merges.
    floor = len(specials) + 256 + (_FALLBACK_ALPHABET if style == "byte_fallback" else 0) + 32
    if vocab_size < floor:
        raise SwiftcoreError(
            f"tiny tokenizer: vocab_size {vocab_size} is too small for {len(specials)} special tokens and "
            f"the byte alphabet; use at least {floor}"
        )

    from swiftcore_tiny._corpus import TINY_CORPUS

    text = list(corpus) if corpus is not None else list(TINY_CORPUS)
    if style == "byte_fallback":
        tokenizer = _train_byte_fallback(text, specials, vocab_size, unk)
    else:
        tokenizer = _train_bytelevel(text, specials, vocab_size, split_regex)

    # The trainer adds every special token as "special"; mark the ones decoding keeps as not special.
    keep = set(non_special)
    data = json.loads(tokenizer.to_str())
    for entry in data["added_tokens"]:
        entry["special"] = entry["content"] not in keep
    tokenizer = Tokenizer.from_str(json.dumps(data))
    if add_bos_token:
        if bos is None:
            raise SwiftcoreError("tiny tokenizer: add_bos_token=True needs a bos token")
        from tokenizers.processors import TemplateProcessing

        bos_id = specials.index(bos)
        tokenizer.post_processor = TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, bos_id)]
        )

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _save(
        tokenizer,
        out,
        tokenizer_class,
        eos=eos,
        pad=pad,
        bos=bos,
        unk=unk,
        named=named,
        chat_template=chat_template,
        add_bos_token=add_bos_token,
        model_max_length=model_max_length,
    )

    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(out))


def _train_bytelevel(text: list[str], specials: list[str], vocab_size: int, split_regex: str | None) -> Any:
    """Byte-level BPE: ByteLevel's own regex, or NFC + ``split_regex`` then byte-level without regex."""
    from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import BPE
    from tokenizers.trainers import BpeTrainer

    tokenizer = Tokenizer(BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    if split_regex is None:
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        # The caller takes the split regex from transformers' module for its tokenizer class, so the
        # layout cannot drift from the class that AutoTokenizer rebuilds (notes/tiny_models.md).
        tokenizer.normalizer = normalizers.NFC()
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(split_regex), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(text, trainer=trainer)
    return tokenizer


def _train_byte_fallback(text: list[str], specials: list[str], vocab_size: int, unk: str | None) -> Any:
    """BPE with byte fallback, ``▁`` for spaces (ids: specials, bytes, pieces), e.g. ``GemmaTokenizer``'s."""
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import BPE
    from tokenizers.trainers import BpeTrainer

    if unk is None:
        raise SwiftcoreError("tiny tokenizer: style 'byte_fallback' needs an unk token (e.g. '<unk>')")

    def layout(model: BPE) -> Tokenizer:
        tok = Tokenizer(model)
        tok.normalizer = normalizers.Replace(" ", "▁")
        tok.pre_tokenizer = pre_tokenizers.Split(pattern=" ", behavior="merged_with_previous", invert=False)
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
        return tok

    byte_tokens = [f"<0x{i:02X}>" for i in range(256)]
    # Train the pieces on their own, then lay the vocabulary out: specials, the 256
    # byte-fallback tokens, then the learned pieces; merges refer to pieces by string, so stay valid.
    # Keep the most frequent characters (ties broken by code point, so training is reproducible:
    # the trainer's own limit_alphabet breaks ties in hash order); the rest fall back to bytes.
    counts = Counter(ch for line in text for ch in line.replace(" ", "▁"))
    alphabet = [ch for ch, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:_FALLBACK_ALPHABET]]
    trainer = BpeTrainer(
        vocab_size=vocab_size - 256,
        special_tokens=specials,
        initial_alphabet=alphabet,
        limit_alphabet=len(alphabet),
        show_progress=False,
    )
    trained = layout(BPE(unk_token=unk, fuse_unk=True, byte_fallback=True))
    trained.train_from_iterator(text, trainer=trainer)
    learned = json.loads(trained.to_str())
    pieces = sorted(learned["model"]["vocab"].items(), key=lambda kv: kv[1])
    vocab: dict[str, int] = {}
    for token in [*specials, *byte_tokens, *(p for p, _ in pieces)]:
        vocab.setdefault(token, len(vocab))
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in learned["model"]["merges"]]
    tokenizer = layout(BPE(vocab=vocab, merges=merges, unk_token=unk, fuse_unk=True, byte_fallback=True))
    tokenizer.add_special_tokens(specials)
    return tokenizer


def _save(
    tokenizer: Any,
    out: Path,
    tokenizer_class: str,
    *,
    eos: str,
    pad: str,
    bos: str | None,
    unk: str | None,
    named: dict[str, str],
    chat_template: str | None,
    add_bos_token: bool,
    model_max_length: int,
) -> None:
    """Save through ``PreTrainedTokenizerFast`` so the files are what ``save_pretrained`` writes."""
    from transformers import PreTrainedTokenizerFast

    kwargs: dict[str, Any] = {"eos_token": eos, "pad_token": pad, "model_max_length": model_max_length}
    if bos is not None:
        kwargs["bos_token"] = bos
    if unk is not None:
        kwargs["unk_token"] = unk
    if named:
        kwargs["extra_special_tokens"] = named
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, **kwargs)
    if chat_template is not None:
        fast.chat_template = chat_template
    fast.save_pretrained(str(out))
    # Name the class AutoTokenizer should build, and whether it prepends BOS, the way real
    # checkpoints do; save_pretrained writes the generic class.
    config_path = out / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["tokenizer_class"] = tokenizer_class
    config["add_bos_token"] = add_bos_token
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
