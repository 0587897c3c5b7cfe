"""Small helpers Python templates use to build segments."""

from __future__ import annotations

from swiftcore.template.segments import Segment

__all__ = ["media", "prompt", "strip_pieces", "text_of"]


def text_of(pieces: list[Segment]) -> str:
    """The text of some pieces."""
    return "".join([p[0] for p in pieces])  # a list, not a generator: join builds one anyway


def strip_pieces(pieces: list[Segment]) -> list[Segment]:
    """Strip leading and trailing whitespace from the concatenation of ``pieces`` (Jinja's ``|trim``),
    keeping media pieces whole."""
    if len(pieces) == 1 and pieces[0].kind == "prompt":  # the common case: one string content
        only = pieces[0]
        stripped = only.text.strip()
        if stripped == only.text:
            return pieces
        return [Segment(stripped, "prompt", only.message)] if stripped else []
    text = text_of(pieces)
    lead = len(text) - len(text.lstrip())
    end = len(text.rstrip())
    if lead == 0 and end == len(text):
        return pieces
    out: list[Segment] = []
    pos = 0
    for p in pieces:
        a, b = max(lead - pos, 0), min(end - pos, len(p.text))
        if a < b:
            out.append(p if (a, b) == (0, len(p.text)) else Segment(p.text[a:b], p.kind, p.message, p.media))
        pos += len(p.text)
    return out


def prompt(text: str, message: int | None = None) -> Segment:
    """A prompt (never trained) piece."""
    return Segment(text, "prompt", message)


def media(text: str, kind: str, item: object, message: int | None) -> Segment:
    """A media placeholder piece."""
    return Segment(text, "media", message, (kind, item))
