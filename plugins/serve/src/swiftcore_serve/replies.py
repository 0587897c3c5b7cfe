"""A finished :class:`~swiftcore_infer.Generation` in OpenAI's shapes (message, finish reason, usage, tool calls)."""

from __future__ import annotations

import uuid
from typing import Any

from swiftcore_infer import Generation, InferError

__all__ = ["finish_reason", "message", "prompt_usage", "raise_failed", "tool_calls", "usage"]


def raise_failed(generation: Generation) -> None:
    """Raise the error a generation ended with (its status kept; 500 when it has none)."""
    if generation.error is not None:
        error = InferError(generation.error)
        error.status = generation.error_status or 500
        raise error


def tool_calls(generation: Generation) -> list[dict[str, Any]]:
    """The generation's tool calls as OpenAI ``tool_calls`` (an id made up where the model gave none)."""
    return [
        {
            "id": call.get("id") or f"call_{uuid.uuid4().hex[:24]}",
            "type": "function",
            "function": call.get("function", call),
        }
        for call in (generation.tool_calls or [])
    ]


def message(generation: Generation) -> dict[str, Any]:
    """The assistant message of a chat completion: content, reasoning and tool calls where there are any."""
    out: dict[str, Any] = {"role": "assistant", "content": generation.content}
    if generation.reasoning_content is not None:
        out["reasoning_content"] = generation.reasoning_content
    calls = tool_calls(generation)
    if calls:
        out["tool_calls"] = calls
    return out


def finish_reason(generation: Generation) -> str:
    """OpenAI's finish reason: ``tool_calls`` when the model stopped after calling tools."""
    return "tool_calls" if generation.tool_calls and generation.finish_reason == "stop" else generation.finish_reason


def usage(generation: Generation) -> dict[str, int]:
    """The ``usage`` object of one generation."""
    return {
        "prompt_tokens": generation.prompt_tokens,
        "completion_tokens": generation.completion_tokens,
        "total_tokens": generation.prompt_tokens + generation.completion_tokens,
    }


def prompt_usage(tokens: int) -> dict[str, int]:
    """The ``usage`` of a request that generates nothing (embeddings, rerank, classify): all prompt tokens."""
    return {"prompt_tokens": tokens, "total_tokens": tokens}
