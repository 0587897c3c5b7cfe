"""From a rendered layout to token ids, labels and media positions.

The whole rendered text is tokenized once, so ``input_ids`` equal ``tokenizer(text, add_special_tokens=False)``
by construction; labels and media positions come from the character spans the template reported. A token
belongs to a span when its first character does; only the span boundaries are mapped to tokens.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from swiftcore.template.errors import SampleTooLongError, TemplateError
from swiftcore.template.segments import Layout

__all__ = [
    "IGNORE_INDEX",
    "LOSS_POLICIES",
    "TRUNCATIONS",
    "Encoded",
    "Locate",
    "Media",
    "check_options",
    "encode_layout",
    "encode_texts",
    "encoding_locator",
    "starts_locator",
    "token_views",
    "tokenize",
]

IGNORE_INDEX = -100
LOSS_POLICIES = ("all_assistant", "last_round", "all")
TRUNCATIONS = ("error", "truncate_left", "truncate_right", "drop")


@dataclass(frozen=True)
class Media:
    """A media placeholder in an encoded sample.

    Attributes:
        type: ``image``, ``video`` or ``audio``.
        item: the content part it stands for (e.g. ``{"type": "image", "image": "cat.png"}``).
        start: index of its first token in ``input_ids``.
        end: index one past its last token.
        text: the placeholder text.
    """

    type: str
    item: Any
    start: int
    end: int
    text: str


@dataclass
class Encoded:
    """An encoded sample.

    Attributes:
        input_ids: token ids.
        labels: ``input_ids`` where the token carries loss, ``-100`` elsewhere.
        text: the encoded text (before truncation): the rendering, and in training the stop token appended to
            a last reply the rendering ends with none (:meth:`swiftcore.template.base.Template.closing_stop`).
        media: the media placeholders with their token positions (after truncation).
        truncated: how many tokens truncation removed.
    """

    input_ids: list[int]
    labels: list[int]
    text: str
    media: list[Media] = field(default_factory=list)
    truncated: int = 0

    def __len__(self) -> int:
        return len(self.input_ids)

    def to_dict(self) -> dict[str, Any]:
        """A plain dict (``input_ids``, ``labels``, ``length``, ``media``) for datasets and JSON."""
        return {
            "input_ids": self.input_ids,
            "labels": self.labels,
            "length": len(self.input_ids),
            "media": [{"type": m.type, "item": m.item, "start": m.start, "end": m.end} for m in self.media],
        }


def _backend(tokenizer: Any) -> Any | None:
    """The Rust ``tokenizers.Tokenizer`` behind a tokenizer, when there is one (fast path)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return backend
    if hasattr(tokenizer, "encode_batch") and hasattr(tokenizer, "get_vocab"):
        return tokenizer  # already a tokenizers.Tokenizer
    return None


#: ``locate(char)``: the index of the first token that starts at or after character ``char``.
Locate = Callable[[int], int]


def starts_locator(starts: Sequence[int]) -> Locate:
    """A :data:`Locate` from every token's start offset (binary search; the reference rule)."""
    return partial(bisect_left, starts)


def encoding_locator(encoding: Any) -> Locate:
    """A :data:`Locate` that asks a Rust ``tokenizers.Encoding`` about span boundaries only.

    Same answers as :func:`starts_locator` on ``encoding.offsets``, without building the per-token offsets list (a
    Python tuple per token, ~10% of encoding time): a sample has a few span boundaries but hundreds of tokens.
    ``char_to_token`` finds the token holding the character; a short walk then applies the bisect rule exactly (a token
    that starts before the boundary is not in the span, and several tokens may share a start when one character is split
    into byte tokens). Characters no token covers (a normaliser dropped them) fall back to the full offsets.
    """
    n = len(encoding)
    char_to_token, token_to_chars = encoding.char_to_token, encoding.token_to_chars
    last_start = token_to_chars(n - 1)[0] if n else -1
    fallback: list[Locate] = []

    def slow(char: int) -> int:
        if not fallback:
            fallback.append(starts_locator([s for s, _ in encoding.offsets]))
        return fallback[0](char)

    def locate(char: int) -> int:
        if char > last_start:  # e.g. a span that ends the text: every token starts before it
            return n
        token = char_to_token(char)
        if token is None:
            return slow(char)
        while token > 0 and token_to_chars(token - 1)[0] >= char:
            token -= 1
        while token < n and token_to_chars(token)[0] < char:
            token += 1
        return token

    return locate


def encode_texts(tokenizer: Any, texts: Sequence[str]) -> Any:
    """Tokenize texts without adding special tokens; the tokenizer's raw output, for :func:`token_views`.

    Uses the Rust tokenizer's ``encode_batch`` when there is one (what ``tokenizer(texts)`` does
    underneath, without building a ``BatchEncoding``; it tokenizes on every core with the GIL released,
    and a single text skips the thread pool); otherwise calls the tokenizer with
    ``return_offsets_mapping=True``. Safe to run on a worker thread while Python renders.
    """
    backend = _backend(tokenizer)
    if backend is None:
        return tokenizer(list(texts), add_special_tokens=False, return_offsets_mapping=True)
    if len(texts) == 1:
        return [backend.encode(texts[0], add_special_tokens=False)]
    return backend.encode_batch(texts if isinstance(texts, list) else list(texts), add_special_tokens=False)


def token_views(raw: Any) -> list[tuple[list[int], Locate]]:
    """``(ids, locate)`` per text from :func:`encode_texts`' output.

    Rust encodings locate span boundaries with :func:`encoding_locator`; a tokenizer's offsets mapping
    (the reference path) is bisected.
    """
    if isinstance(raw, list):
        return [(e.ids, encoding_locator(e)) for e in raw]
    return [
        (ids, starts_locator([s for s, _ in offs]))
        for ids, offs in zip(raw["input_ids"], raw["offset_mapping"], strict=True)
    ]


def tokenize(tokenizer: Any, texts: Sequence[str]) -> list[tuple[list[int], Locate]]:
    """Tokenize texts without adding special tokens; ``(ids, locate)`` per text.

    See :func:`encode_texts` and :func:`token_views`.
    """
    return token_views(encode_texts(tokenizer, texts))


def check_options(loss_policy: str, truncation: str) -> None:
    """Raise :class:`TemplateError` for an unknown ``loss_policy`` or ``truncation``."""
    if loss_policy not in LOSS_POLICIES:
        raise TemplateError(f"unknown loss_policy {loss_policy!r}; use one of {', '.join(LOSS_POLICIES)}")
    if truncation not in TRUNCATIONS:
        raise TemplateError(f"unknown truncation {truncation!r}; use one of {', '.join(TRUNCATIONS)}")


def encode_layout(
    layout: Layout,
    ids: list[int],
    locate: Locate | Sequence[int],
    *,
    loss_policy: str = "all_assistant",
    max_length: int | None = None,
    truncation: str = "error",
    where: str = "record",
    checked: bool = False,
) -> Encoded | None:
    """Labels, media positions and truncation for one tokenized layout.

    Args:
        layout: the rendering and its spans.
        ids: the token ids of ``layout.text``.
        locate: maps a character offset to the first token starting at or after it (see
            :func:`encoding_locator`), or each token's first character offset.
        loss_policy: ``all_assistant`` (every assistant turn), ``last_round`` (assistant turns after the
            last user message) or ``all`` (every token).
        max_length: the longest allowed sample in tokens (None: no limit).
        truncation: ``error``, ``truncate_left`` (drop the oldest tokens), ``truncate_right`` or ``drop``
            (return None). Truncation never cuts a media placeholder in half: it drops it whole.
        where: names the record in error messages.
        checked: the caller already validated ``loss_policy`` and ``truncation`` (batch callers check once).

    Returns:
        The :class:`Encoded`, or None when ``truncation="drop"`` and the sample is too long.
    """
    if not checked:
        check_options(loss_policy, truncation)
    if not callable(locate):
        locate = starts_locator(locate)
    n = len(ids)
    if loss_policy == "all":
        labels = list(ids)  # a copy: labels and ids are changed independently downstream
    else:
        labels = [IGNORE_INDEX] * n
        last_round = loss_policy == "last_round"
        for turn in layout.turns:
            if last_round and turn.message <= layout.last_user:
                continue
            lo, hi = locate(turn.start), locate(turn.end)
            labels[lo:hi] = ids[lo:hi]
    media = (
        [Media(m.type, m.item, locate(m.start), locate(m.end), layout.text[m.start : m.end]) for m in layout.media]
        if layout.media
        else []
    )
    enc = Encoded(ids, labels, layout.text, media)  # ids is the tokenizer's fresh list: no copy
    if max_length is None or n <= max_length:
        return enc
    if truncation == "error":
        raise SampleTooLongError(
            f"{where}: {n} tokens is longer than max_length={max_length}; raise max_length or choose "
            "truncation='truncate_left', 'truncate_right' or 'drop'"
        )
    if truncation == "drop":
        return None
    return _truncate(enc, max_length, left=truncation == "truncate_left")


def _truncate(enc: Encoded, max_length: int, left: bool) -> Encoded:
    n = len(enc.input_ids)
    if left:
        cut = n - max_length
        for m in enc.media:  # a cut inside a placeholder moves past it: the placeholder goes whole
            if m.start < cut < m.end:
                cut = m.end
        keep = slice(cut, n)
        media = [Media(m.type, m.item, m.start - cut, m.end - cut, m.text) for m in enc.media if m.start >= cut]
    else:
        cut = max_length
        for m in enc.media:
            if m.start < cut < m.end:
                cut = m.start
        keep = slice(0, cut)
        media = [m for m in enc.media if m.end <= cut]
    ids, labels = enc.input_ids[keep], enc.labels[keep]
    return Encoded(ids, labels, enc.text, media, truncated=n - len(ids))
