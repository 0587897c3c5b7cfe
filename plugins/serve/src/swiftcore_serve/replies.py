"""A finished :class:`~swiftcore_infer.Generation` in OpenAI's shapes (message, finish reason, usage, tool calls)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from swiftcore_infer import Generation, InferError

__all__ = [
    "chat_logprobs",
    "completion_logprobs",
    "finish_reason",
    "message",
    "prompt_usage",
    "raise_failed",
    "tool_calls",
    "usage",
]


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


def _piece(tokenizer: Any, token: int) -> str:
    """One token's text (special tokens kept, as vLLM reports them)."""
    return tokenizer.decode([token], skip_special_tokens=False)


def completion_logprobs(tokenizer: Any, ids: Sequence[int], entries: Sequence[Any]) -> dict[str, Any]:
    """OpenAI's legacy completion ``logprobs``: ``tokens``, ``token_logprobs`` (None for an echoed prompt's first
    token), ``top_logprobs`` (each position's alternatives and its own token, as vLLM reports them) and
    ``text_offset`` (each token's offset in the returned text).

    Args:
        tokenizer: decodes each token.
        ids: the token ids the entries score.
        entries: :class:`~swiftcore_infer.TokenLogprob` per id, or None where nothing precedes the token.
    """
    tokens = [_piece(tokenizer, t) for t in ids]
    offsets, at = [], 0
    for token in tokens:
        offsets.append(at)
        at += len(token)
    tops: list[dict[str, float] | None] = []
    for entry in entries:
        if entry is None:
            tops.append(None)
        else:
            top: dict[str, float] = {}
            for t, v in (*entry.top, (entry.token_id, entry.logprob)):  # most likely first: it keeps a shared text
                top.setdefault(_piece(tokenizer, t), v)
            tops.append(top)
    return {
        "tokens": tokens,
        "token_logprobs": [None if e is None else e.logprob for e in entries],
        "top_logprobs": tops,
        "text_offset": offsets,
    }


def chat_logprobs(tokenizer: Any, ids: Sequence[int], entries: Sequence[Any]) -> dict[str, Any]:
    """A chat reply's ``logprobs``: ``{"content": [{token, logprob, bytes, top_logprobs}]}``, one per generated
    token."""

    def item(token: str, logprob: float) -> dict[str, Any]:
        return {"token": token, "logprob": logprob, "bytes": list(token.encode())}

    content = []
    for token_id, entry in zip(ids, entries, strict=True):
        content.append(
            {
                **item(_piece(tokenizer, token_id), entry.logprob),
                "top_logprobs": [item(_piece(tokenizer, t), v) for t, v in entry.top],
            }
        )
    return {"content": content}
