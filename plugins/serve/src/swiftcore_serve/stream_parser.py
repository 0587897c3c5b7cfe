"""Split a streamed reply into ``reasoning_content`` and ``content`` deltas as it arrives.

The template parses the whole reply at the end (``tool_calls`` come from that); while streaming, this
small state machine routes text between the thinking markers to ``reasoning_content``, text after them
to ``content``, and holds everything from the tool-call marker on (the tool calls are sent parsed, once,
at the end). Text that may be the start of a marker is held back until it is decided. A template whose
replies start with metadata before the answer (Qwen3-ASR's ``language English<asr_text>...``) declares
``content_start``: everything up to that marker is held back, and what follows it is ``content``. A template whose
parse drops a label from the start of the content (ReAct's ``Thought:``) declares ``content_label``; it is dropped
from the stream too.
"""

from __future__ import annotations

from typing import Any

__all__ = ["StreamParser", "markers_for"]


def markers_for(template: Any) -> tuple[str, str, str]:
    """``(think_start, think_end, tool_call_start)`` of a template (defaults: the common ``<think>`` markers).

    A template may declare ``reasoning_markers = (start, end)`` and ``tool_call_start`` to override them.
    """
    start, end = getattr(template, "reasoning_markers", ("<think>", "</think>"))
    return start, end, getattr(template, "tool_call_start", "<tool_call>")


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``marker``."""
    for size in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0


class StreamParser:
    """Feed text deltas; get ``(field, text)`` pieces where field is ``reasoning_content`` or ``content``.

    Args:
        in_reasoning: the prompt already opened a thinking block (its generation prompt ends with it).
        think_start: the opening thinking marker.
        think_end: the closing thinking marker.
        tool_start: the marker that starts a tool call.
        content_start: the marker the answer follows (the template's ``content_start``), or None; a reply
            that never writes it is all content, as the template parses it.
        content_label: a label the template's parse drops from the start of the content (the template's
            ``content_label``, ReAct's ``Thought:``), or None.
    """

    def __init__(
        self,
        in_reasoning: bool = False,
        think_start: str = "<think>",
        think_end: str = "</think>",
        tool_start: str = "<tool_call>",
        content_start: str | None = None,
        content_label: str | None = None,
    ) -> None:
        self.content_start = content_start
        self.content_label = content_label or None
        self.mode = "reasoning" if in_reasoning else ("prefix" if content_start else "start")
        self.buffer = ""
        self.think_start, self.think_end, self.tool_start = think_start, think_end, tool_start
        self._content_started = False

    def feed(self, text: str) -> list[tuple[str, str]]:
        """Add generated text; return the pieces that are decided."""
        self.buffer += text
        out: list[tuple[str, str]] = []
        while True:
            if self.mode == "prefix":
                assert self.content_start is not None
                if self.content_start not in self.buffer:
                    return out  # metadata, or an answer without the marker: decided at the end
                self.buffer = self.buffer.partition(self.content_start)[2]
                self.mode = "content"
                continue
            if self.mode == "start":
                stripped = self.buffer.lstrip()
                if stripped.startswith(self.think_start):
                    self.buffer = stripped[len(self.think_start) :]
                    self.mode = "reasoning"
                    continue
                if not stripped or self.think_start.startswith(stripped):
                    return out  # could still become a thinking block
                self.mode = "content"
                continue
            if self.mode == "reasoning":
                if self.think_end in self.buffer:
                    before, _, self.buffer = self.buffer.partition(self.think_end)
                    self._emit(out, "reasoning_content", before)
                    self.mode = "content"
                    continue
                keep = _partial_suffix(self.buffer, self.think_end)
                self._emit(out, "reasoning_content", self.buffer[: len(self.buffer) - keep])
                self.buffer = self.buffer[len(self.buffer) - keep :]
                return out
            if self.mode == "content":
                if self.content_label is not None and not self._content_started:
                    stripped = self.buffer.lstrip()
                    if stripped.startswith(self.content_label):
                        self.buffer = stripped[len(self.content_label) :]
                    elif self.content_label.startswith(stripped):
                        return out  # could still be the label
                    self.content_label = None  # dropped, or the content has none
                    continue
                if self.tool_start in self.buffer:
                    before, _, rest = self.buffer.partition(self.tool_start)
                    self._emit(out, "content", before.rstrip())
                    self.buffer = self.tool_start + rest
                    self.mode = "tools"
                    continue
                # Whitespace before the held part waits too: the template's parse strips it before a tool
                # call and at the end of the reply.
                cut = len(self.buffer) - _partial_suffix(self.buffer, self.tool_start)
                while cut > 0 and self.buffer[cut - 1].isspace():
                    cut -= 1
                self._emit(out, "content", self.buffer[:cut])
                self.buffer = self.buffer[cut:]
                return out
            return out  # "tools": held for the final parse

    def flush(self) -> list[tuple[str, str]]:
        """The undecided rest at the end of the reply."""
        out: list[tuple[str, str]] = []
        if self.mode in ("start", "content", "prefix"):
            self._emit(out, "content", self.buffer.rstrip())
        elif self.mode == "reasoning":
            self._emit(out, "reasoning_content", self.buffer)
        self.buffer = ""
        return out

    def _emit(self, out: list[tuple[str, str]], field: str, text: str) -> None:
        if field == "content" and not self._content_started:
            # The template's parse strips the whitespace between the thinking block and the answer.
            text = text.lstrip()
            self._content_started = bool(text)
        if text:
            out.append((field, text))
