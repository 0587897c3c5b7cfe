"""A finished :class:`~swiftcore_infer.Generation` in OpenAI's shapes (message, finish reason, usage, tool calls)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

from swiftcore_infer import Generation, InferError

__all__ = [
    "chat_logprobs",
    "completion_logprobs",
    "finish_reason",
    "message",
    "prompt_usage",
    "raise_failed",
    "token_spans",
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


#: Tokens decoded before a token to read its text as it reads in the whole reply (a leading space, a byte pair).
_CONTEXT_TOKENS = 5


def token_spans(
    decode: Callable[[Sequence[int]], str], tokens: Sequence[int], texts: Sequence[str], stops: Sequence[str] = ()
) -> list[range]:
    """Which of a streamed reply's ``tokens`` each of its pieces (``texts``, in order, the last one's included)
    carries: the ``range`` of token indices per piece, together covering every token once, in order.

    The engine sends a piece once its text grows past what it sent (holding back a last character that is not
    whole yet, and the characters that may start a stop string); so a piece carries the tokens generated since the
    piece before it, up to the one whose text took the stream to the piece's end: a token that ends inside a
    multi-byte character goes with the piece that completes the character, a token whose text may start a stop
    string with the piece that sends it, and the tokens after the last piece sent before the end (a stop string's,
    and those of text never sent) with the last piece.

    Args:
        decode: the engine's ``decode`` (the text the stream was cut from).
        tokens: the reply's generated token ids (``Generation.token_ids``).
        texts: the ``text`` of each :class:`~swiftcore_infer.StreamDelta`, in order.
        stops: the request's stop strings (``SamplingParams.stop``).
    """
    hold = max((len(s) for s in stops), default=1) - 1  # as the engine holds text that may start a stop string
    ends, at = [], 0
    for text in texts:
        at += len(text)
        ends.append(at)
    spans, piece, start = [], 0, 0
    # The text up to token ``whole`` is all whole characters, ``done`` long. Each token's text is that followed by
    # what its tokens from there decode to, decoded after a few tokens before it (a token may read differently after
    # others, as a leading space): linear in the reply's length, where decoding every prefix again is quadratic.
    whole, done = 0, 0
    for index in range(len(tokens)):
        if piece == len(ends) - 1:
            break  # the rest is the last piece's
        context = max(0, whole - _CONTEXT_TOKENS)
        before = len(decode(tokens[context:whole]))
        tail = decode(tokens[context : index + 1])
        if tail.endswith("\ufffd"):  # a character not whole yet: the engine holds it back
            sent = done + tail.rfind("\ufffd") - before - hold
        else:
            done += len(tail) - before
            whole, sent = index + 1, done - hold
        if sent >= ends[piece]:  # this token took the stream to the piece's end: the piece was sent
            spans.append(range(start, index + 1))
            start, piece = index + 1, piece + 1
    spans.append(range(start, len(tokens)))
    spans += [range(len(tokens), len(tokens))] * (len(texts) - len(spans))
    return spans


def completion_logprobs(tokenizer: Any, ids: Sequence[int], entries: Sequence[Any], offset: int = 0) -> dict[str, Any]:
    """OpenAI's legacy completion ``logprobs``: ``tokens``, ``token_logprobs`` (None for an echoed prompt's first
    token), ``top_logprobs`` (each position's alternatives and its own token, as vLLM reports them) and
    ``text_offset`` (each token's offset in the returned text).

    Args:
        tokenizer: decodes each token.
        ids: the token ids the entries score.
        entries: :class:`~swiftcore_infer.TokenLogprob` per id, or None where nothing precedes the token.
        offset: the first token's ``text_offset`` (a streamed chunk's: the length of the tokens sent before it).
    """
    tokens = [_piece(tokenizer, t) for t in ids]
    offsets, at = [], offset
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
