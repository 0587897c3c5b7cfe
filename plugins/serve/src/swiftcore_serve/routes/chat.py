"""``POST /v1/chat/completions``: a conversation answered whole, or streamed as server-sent events."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request as HttpRequest
from swiftcore_infer import Request, media_kinds, openai_media_parts, strip_media_values

from swiftcore_serve import replies
from swiftcore_serve.openapi import documented
from swiftcore_serve.protocol import ChatCompletionRequest, ChatCompletionResponse, sampling_from
from swiftcore_serve.routing import api_router, sse, unless_disconnected
from swiftcore_serve.state import ServeState, StateDep
from swiftcore_serve.stream_parser import StreamParser, markers_for

__all__ = ["router"]

router = api_router()


@router.post("/v1/chat/completions", response_model=None, responses=documented(ChatCompletionResponse, stream=True))
async def chat(body: ChatCompletionRequest, http: HttpRequest, state: StateDep) -> Any:
    """Answer a chat request (tools, ``chat_template_kwargs``, images and audio for models that take them)."""
    adapter = state.adapter_for(body.model)
    state.require_generation()
    top = body.top_logprobs_wanted()  # None: no logprobs
    config = state.config
    record = body.record()
    if media_kinds(record):  # OpenAI's image_url / input_audio parts -> the template's parts (cheap checks)
        record = openai_media_parts(record, state.media_modalities, body.model, config.media)
    state.limits.check_text(strip_media_values(record), "messages")
    request = Request(
        record=record,
        sampling=sampling_from(body, config.default_max_tokens),
        adapter=adapter,
        request_id=f"chatcmpl-{uuid.uuid4().hex}",
        media_policy=config.media,
    )
    await state.encode_media(request)
    if body.stream:
        include_usage = bool((body.stream_options or {}).get("include_usage"))
        return await sse(http, _chunks(state, request, body.model, include_usage), state.redact)
    generation = await unless_disconnected(http, state.worker.generate(request))
    replies.raise_failed(generation)
    logprobs = None
    if top is not None:  # scored on the engine's thread, after the reply (the raw log-probs, as vLLM's default)
        engine = state.engine

        def score() -> dict[str, Any]:
            ids, entries = engine.completion_logprobs(request, generation.token_ids, top_logprobs=top)
            return replies.chat_logprobs(engine.tokenizer, ids, entries)

        logprobs = await unless_disconnected(http, state.worker.call(score))
    return {
        "id": request.request_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.model,
        "choices": [
            {
                "index": 0,
                "message": replies.message(generation),
                "logprobs": logprobs,
                "finish_reason": replies.finish_reason(generation),
            }
        ],
        "usage": replies.usage(generation),
    }


async def _chunks(
    state: ServeState, request: Request, model: str, include_usage: bool
) -> AsyncIterator[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects of a streamed reply: role, then reasoning, content and tool calls."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": request.request_id,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }

    engine = state.engine
    think_start, think_end, tool_start = markers_for(engine.template)
    parser: StreamParser | None = None
    async for delta in state.worker.stream(request):
        if parser is None:  # first delta: the request was accepted
            parser = StreamParser(
                _prompt_opens_thinking(engine, request, think_start),
                think_start,
                think_end,
                tool_start,
                content_start=getattr(engine.template, "content_start", None),
                content_label=getattr(engine.template, "content_label", None),
            )
            yield chunk({"role": "assistant", "content": ""})
        for name, text in parser.feed(delta.text):
            yield chunk({name: text})
        if delta.final is not None:
            for name, text in parser.flush():
                yield chunk({name: text})
            final = delta.final
            calls = replies.tool_calls(final)
            if calls:
                yield chunk({"tool_calls": [{"index": i, **c} for i, c in enumerate(calls)]})
            yield chunk({}, replies.finish_reason(final))
            if include_usage:
                yield {
                    "id": request.request_id,
                    "object": "chat.completion.chunk",
                    "created": int(time.time()),
                    "model": model,
                    "choices": [],
                    "usage": replies.usage(final),
                }


def _prompt_opens_thinking(engine: Any, request: Request, think_start: str) -> bool:
    """Whether the prompt ends inside an open thinking block (the reply starts with reasoning): decided on
    the ids the engine encodes (with the checkpoint's defaults), exactly as the non-streamed parse does.
    The engine thread has encoded the request already (its first piece came back): those ids are reused, so
    the event loop never decodes the request's media."""
    try:
        ids = request.encoded if request.encoded is not None else engine.encode(request)
        return engine.prompt_opens_thinking(ids)
    except Exception:  # the request was already encoded; this only guides streaming
        return False
