"""What a template renders: text in segments, and the layout (turn and media spans) built from them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Layout", "MediaSlot", "Segment", "Turn", "layout_from_segments", "prompt_overlap"]


@dataclass(frozen=True, slots=True)
class Segment:
    """A piece of rendered text.

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


@dataclass(frozen=True, slots=True)
class Turn:
    """The trainable characters of one assistant turn: ``text[start:end]`` of the rendering."""

    start: int
    end: int
    message: int


@dataclass(frozen=True, slots=True)
class MediaSlot:
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

    The longest common prefix, backed off to a boundary of the generation prompt's pieces (after a
    newline or a ``>``, before a ``<``, or its end) so it never ends inside a special token: with
    ``<|turn>model\n<|channel>...`` as the prompt, a turn ``<|turn>model\n<turn|>`` overlaps by the
    header only, not by the ``<`` of ``<turn|>``.
    """
    if turn.startswith(generation_prompt):
        return len(generation_prompt)
    lo, hi = 0, min(len(turn), len(generation_prompt))
    while lo < hi:  # longest common prefix by bisection: a few C-level compares instead of a char loop
        mid = (lo + hi + 1) // 2
        if turn[:mid] == generation_prompt[:mid]:
            lo = mid
        else:
            hi = mid - 1
    common = lo
    for cut in range(common, 0, -1):
        if generation_prompt[cut - 1] in "\n>" or generation_prompt[cut] == "<":
            return cut
    return 0


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
    texts = [s.text for s in segments]
    layout = Layout(text="".join(texts), last_user=last_user)
    pos = 0
    for seg in segments:
        size = len(seg.text)
        if seg.kind in ("assistant", "answer"):
            skip = prompt_overlap(seg.text, generation_prompt) if seg.kind == "assistant" else 0
            layout.turns.append(Turn(pos + skip, pos + size, -1 if seg.message is None else seg.message))
        elif seg.kind == "media" and seg.media is not None:
            layout.media.append(MediaSlot(seg.media[0], seg.media[1], pos, pos + size, seg.message))
        pos += size
    return layout
