"""What a template renders: text in segments, and the layout (turn and media spans) built from them."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, NamedTuple

__all__ = ["Layout", "MediaSlot", "Segment", "Turn", "layout_from_segments", "prompt_overlap"]


class Segment(NamedTuple):
    """A piece of rendered text (a named tuple: templates build tens per sample, and a tuple is built
    several times faster than a frozen dataclass).

    Attributes:
        text: the text.
        kind: ``"prompt"`` (never trained), ``"assistant"`` (an assistant turn from its role header up
            to and including its end-of-turn token; the part the generation prompt supplies is not
            trained), ``"answer"`` (more trained text of the same turn, e.g. after a tool response
            rendered inside the turn) or ``"media"`` (one media placeholder).
        message: the index of the message this piece renders (None for template boilerplate).
        media: for ``"media"`` pieces, ``(type, item)``: the media type and the content part.
    """

    text: str
    kind: str = "prompt"
    message: int | None = None
    media: tuple[str, Any] | None = None


class Turn(NamedTuple):
    """The trainable characters of one assistant turn: ``text[start:end]`` of the rendering."""

    start: int
    end: int
    message: int


class MediaSlot(NamedTuple):
    """A media placeholder in the rendered text (character span) and its content part."""

    type: str
    item: Any
    start: int
    end: int
    message: int | None


@dataclass
class Layout:
    """A rendering with the spans the encoder needs.

    Attributes:
        text: the rendered text.
        turns: the assistant turns' trainable spans, in order.
        media: the media placeholders, in order.
        last_user: index of the last user message (for the ``last_round`` loss policy), or -1.
    """

    text: str
    turns: list[Turn] = field(default_factory=list)
    media: list[MediaSlot] = field(default_factory=list)
    last_user: int = -1


def prompt_overlap(turn: str, generation_prompt: str) -> int:
    """How many leading characters of an assistant turn the generation prompt supplies.

    The longest common prefix, backed off to a boundary of the generation prompt's pieces (after a newline or a ``>``,
    before a ``<``, or its end) so it never ends inside a special token: with ``<|turn>model\n<|channel>...`` as the
    prompt, a turn ``<|turn>model\n<turn|>`` overlaps by the header only, not by the ``<`` of ``<turn|>``.
    """
    if turn.startswith(generation_prompt):
        return len(generation_prompt)
    cuts, prefixes = _boundaries(generation_prompt)
    lo, hi = 0, len(cuts)  # turn.startswith(prefix) holds for a leading run of cuts: bisect for its end
    while lo < hi:
        mid = (lo + hi) // 2
        if turn.startswith(prefixes[mid]):
            lo = mid + 1
        else:
            hi = mid
    return cuts[lo - 1] if lo else 0


@lru_cache(maxsize=64)
def _boundaries(generation_prompt: str) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """The cuts :func:`prompt_overlap` may return below the whole prompt, ascending, with their prefixes."""
    cuts = tuple(
        cut
        for cut in range(1, len(generation_prompt))
        if generation_prompt[cut - 1] in "\n>" or generation_prompt[cut] == "<"
    )
    return cuts, tuple(generation_prompt[:cut] for cut in cuts)


def layout_from_segments(segments: list[Segment], generation_prompt: str, last_user: int) -> Layout:
    """Join segments and find each assistant turn's trainable span.

    An assistant turn trains on what the model would generate after the generation prompt: the part
    of the turn that the generation prompt already supplies (the role header, and e.g. ``<think>\\n`` or
    an empty thinking block) is prompt. The same rule applied to an official Jinja rendering gives the
    same spans, which is what makes the Jinja fallback and the Python templates agree.

    Args:
        segments: the rendered pieces.
        generation_prompt: the text ``add_generation_prompt`` appends for this sample.
        last_user: index of the last user message.
    """
    text = "".join([seg[0] for seg in segments])
    turns: list[Turn] = []
    media: list[MediaSlot] = []
    pos = 0
    for piece, kind, message, slot in segments:  # tuple unpacking: cheaper than attribute access
        size = len(piece)
        if kind != "prompt":
            if kind == "assistant":
                turns.append(
                    Turn(pos + prompt_overlap(piece, generation_prompt), pos + size, -1 if message is None else message)
                )
            elif kind == "answer":
                turns.append(Turn(pos, pos + size, -1 if message is None else message))
            elif kind == "media" and slot is not None:
                media.append(MediaSlot(slot[0], slot[1], pos, pos + size, message))
        pos += size
    return Layout(text, turns, media, last_user)
