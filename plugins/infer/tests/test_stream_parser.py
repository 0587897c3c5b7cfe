"""The streaming splitter routes reasoning and content, and holds markers split across deltas."""

from __future__ import annotations

import pytest
from swiftcore_serve import StreamParser


def _run(parser: StreamParser, pieces: list[str]) -> dict[str, str]:
    out: dict[str, str] = {"reasoning_content": "", "content": ""}
    for piece in pieces:
        for name, text in parser.feed(piece):
            out[name] += text
    for name, text in parser.flush():
        out[name] += text
    return out


@pytest.mark.parametrize("size", [1, 2, 3, 7, 100])
def test_reasoning_then_content_in_any_split(size: int) -> None:
    text = "<think>\nlet me see\n</think>\n\nthe answer"
    pieces = [text[i : i + size] for i in range(0, len(text), size)]
    assert _run(StreamParser(), pieces) == {"reasoning_content": "\nlet me see\n", "content": "the answer"}


def test_prompt_already_opened_thinking() -> None:
    pieces = ["I think", " so</th", "ink>\n\nyes"]
    assert _run(StreamParser(in_reasoning=True), pieces) == {"reasoning_content": "I think so", "content": "yes"}


def test_tool_call_text_is_held_back() -> None:
    pieces = ["Sure.", " <tool", '_call>\n{"name": "f"}\n</tool_call>']
    assert _run(StreamParser(), pieces) == {"reasoning_content": "", "content": "Sure."}


def test_plain_content_passes_through_without_waiting() -> None:
    parser = StreamParser()
    assert parser.feed("hello") == [("content", "hello")]
    assert parser.feed(" <") == []  # '<' may start a tool call, and the space before it would be stripped
    assert parser.feed("b> ") == [("content", " <b>")]  # trailing spaces wait for more text
    assert parser.feed("x") == [("content", " x")]
