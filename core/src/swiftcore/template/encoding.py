"""From a rendered layout to token ids, labels and media positions.

The whole rendered text is tokenized once (with offsets), so ``input_ids`` equal
``tokenizer(text, add_special_tokens=False)`` by construction; labels and media positions come from the
character spans the template reported. A token belongs to a span when its first character does.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from swiftcore.template.errors import SampleTooLongError, TemplateError
from swiftcore.template.segments import Layout

__all__ = ["IGNORE_INDEX", "LOSS_POLICIES", "TRUNCATIONS", "Encoded", "Media", "encode_layout", "tokenize"]

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
        text: the rendered text (before truncation).
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


def tokenize(tokenizer: Any, texts: Sequence[str]) -> list[tuple[list[int], list[int]]]:
    """Tokenize texts without adding special tokens; return ``(ids, token start offsets)`` per text.

    Uses the Rust tokenizer's ``encode_batch`` when there is one (what ``tokenizer(texts)`` does
    underneath, without building a ``BatchEncoding``); otherwise calls the tokenizer with
    ``return_offsets_mapping=True``.
    """
    backend = _backend(tokenizer)
    if backend is not None:
        encodings = backend.encode_batch(list(texts), add_special_tokens=False)
        return [(e.ids, [s for s, _ in e.offsets]) for e in encodings]
    out = tokenizer(list(texts), add_special_tokens=False, return_offsets_mapping=True)
    return [(ids, [s for s, _ in offs]) for ids, offs in zip(out["input_ids"], out["offset_mapping"], strict=False)]


def encode_layout(
    layout: Layout,
    ids: list[int],
    starts: list[int],
    *,
    loss_policy: str = "all_assistant",
    max_length: int | None = None,
    truncation: str = "error",
    where: str = "record",
) -> Encoded | None:
    """Labels, media positions and truncation for one tokenized layout.

    Args:
        layout: the rendering and its spans.
        ids: the token ids of ``layout.text``.
        starts: each token's first character offset.
        loss_policy: ``all_assistant`` (every assistant turn), ``last_round`` (assistant turns after the
            last user message) or ``all`` (every token).
        max_length: the longest allowed sample in tokens (None: no limit).
        truncation: ``error``, ``truncate_left`` (drop the oldest tokens), ``truncate_right`` or ``drop``
            (return None). Truncation never cuts a media placeholder in half: it drops it whole.
        where: names the record in error messages.

    Returns:
        The :class:`Encoded`, or None when ``truncation="drop"`` and the sample is too long.
    """
    if loss_policy not in LOSS_POLICIES:
        raise TemplateError(f"unknown loss_policy {loss_policy!r}; use one of {', '.join(LOSS_POLICIES)}")
    if truncation not in TRUNCATIONS:
        raise TemplateError(f"unknown truncation {truncation!r}; use one of {', '.join(TRUNCATIONS)}")
    n = len(ids)
    if loss_policy == "all":
        labels = list(ids)  # a copy: labels and ids are changed independently downstream
    else:
        labels = [IGNORE_INDEX] * n
        for turn in layout.turns:
            if loss_policy == "last_round" and turn.message <= layout.last_user:
                continue
            lo, hi = bisect_left(starts, turn.start), bisect_left(starts, turn.end)
            labels[lo:hi] = ids[lo:hi]
    media = [
        Media(m.type, m.item, bisect_left(starts, m.start), bisect_left(starts, m.end), layout.text[m.start:m.end])
        for m in layout.media
    ]
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
