"""Helpers to parse generated text back into messages (reasoning, tool calls)."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["json_or_text", "split_reasoning", "tool_call"]


def split_reasoning(text: str, start: str = "<think>", end: str = "</think>") -> tuple[str | None, str]:
    """Split ``[<think>]reasoning</think>content`` into ``(reasoning, content)``.

    A generation prompt that already ends with ``<think>`` leaves only the closing tag in the output,
    so the opening tag is optional. Without a closing tag there is no reasoning.
    """
    if end not in text:
        return None, text.strip()
    reasoning, _, content = text.partition(end)
    reasoning = reasoning.split(start, 1)[-1]
    return reasoning.strip(), content.strip()


def json_or_text(value: str) -> Any:
    """A parameter value: JSON when it parses, the text otherwise."""
    try:
        return json.loads(value)
    except ValueError:
        return value


def tool_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI-style tool call (arguments as a JSON string, as OpenAI's API returns them)."""
    return {"type": "function", "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}
