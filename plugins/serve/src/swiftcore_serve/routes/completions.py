"""``POST /v1/completions``: text completion of one or more prompts (text or token ids), or one streamed."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request as HttpRequest
from swiftcore_infer import Generation, InvalidRequestError, Request

from swiftcore_serve import replies
from swiftcore_serve.openapi import documented
from swiftcore_serve.protocol import CompletionRequest, CompletionResponse, sampling_from
from swiftcore_serve.routing import api_router, sse, unless_disconnected
from swiftcore_serve.state import ServeState, StateDep
from swiftcore_serve.stream_logprobs import stream_with_logprobs

__all__ = ["router"]

router = api_router()


@router.post("/v1/completions", response_model=None, responses=documented(CompletionResponse, stream=True))
async def completions(body: CompletionRequest, http: HttpRequest, state: StateDep) -> Any:
    """Complete each prompt (one engine batch), or stream the completion of a single one."""
    adapter = state.adapter_for(body.model)
    state.require_generation()
    scores_only = body.scores_only()  # max_tokens=0 with echo: the prompt scored, nothing generated
    max_queue = state.config.max_queue
    sampling = sampling_from(body, state.config.default_max_tokens)
    prompts = body.prompts()
    if len(prompts) > max_queue:  # more than could ever be queued: a 429 would never clear
        raise InvalidRequestError(
            f"{len(prompts)} prompts in one request; this server takes at most {max_queue}", param="prompt"
        )
    state.limits.check_prompts(prompts, "prompt")
    rid = f"cmpl-{uuid.uuid4().hex}"
    requests = [
        Request(prompt=p, sampling=sampling, adapter=adapter, request_id=f"{rid}-{i}") for i, p in enumerate(prompts)
    ]
    if body.stream:
        if len(requests) != 1:
            raise InvalidRequestError("streaming takes one prompt per request", param="prompt")
        return await sse(http, _chunks(state, requests[0], rid, body.model, body.logprobs), state.redact)
    generations: list[Generation | None] = [None] * len(requests)
    if not scores_only:
        generations = list(await unless_disconnected(http, state.worker.generate_many(requests)))
        for g in generations:
            replies.raise_failed(g)  # type: ignore[arg-type]
    if body.echo or body.logprobs is not None:  # on the engine's thread: it encodes, scores and decodes
        engine = state.engine
        top, echo = body.logprobs, body.echo

        def work() -> list[tuple[str, dict[str, Any] | None, dict[str, int]]]:
            rows = zip(requests, prompts, generations, strict=True)
            return [_choice(engine, r, p, g, top, echo) for r, p, g in rows]

        choices = await unless_disconnected(http, state.worker.call(work))
    else:
        choices = [(g.text, None, replies.usage(g)) for g in generations]  # type: ignore[union-attr]
    usage = {k: sum(c[2].get(k, 0) for c in choices) for k in ("prompt_tokens", "completion_tokens", "total_tokens")}
    return {
        "id": rid,
        "object": "text_completion",
        "created": int(time.time()),
        "model": body.model,
        "choices": [
            {"index": i, "text": text, "logprobs": logprobs, "finish_reason": g.finish_reason if g else "length"}
            for i, ((text, logprobs, _), g) in enumerate(zip(choices, generations, strict=True))
        ],
        "usage": usage,
    }


def _choice(
    engine: Any, request: Request, prompt: str | list[int], generation: Generation | None, top: int | None, echo: bool
) -> tuple[str, dict[str, Any] | None, dict[str, int]]:
    """One prompt's text (after the prompt with ``echo``), ``logprobs`` (with ``top`` alternatives per token) and
    usage; ``generation`` is None when nothing was generated (``max_tokens=0``)."""
    ids = request.encoded if request.encoded is not None else engine.encode(request)
    generated = generation.token_ids if generation is not None else []
    text = generation.text if generation is not None else ""
    if echo:
        text = (prompt if isinstance(prompt, str) else engine.tokenizer.decode(list(ids))) + text
    logprobs = None
    if top is not None:
        scored_ids, entries = engine.completion_logprobs(request, generated, top_logprobs=top, echo=echo)
        logprobs = replies.completion_logprobs(engine.tokenizer, scored_ids, entries)
    usage = replies.usage(generation) if generation is not None else replies.prompt_usage(len(ids))
    return text, logprobs, usage


async def _chunks(
    state: ServeState, request: Request, rid: str, model: str, top: int | None = None
) -> AsyncIterator[dict[str, Any]]:
    """The ``text_completion`` chunks of a streamed completion (pieces with text, and the last one).

    With ``top`` (``logprobs``) each chunk carries the legacy ``logprobs`` of the tokens that produced its text
    (:mod:`swiftcore_serve.stream_logprobs`), ``text_offset`` counted from the completion's start, as the
    non-streamed reply counts it; a piece that sends no text but carries tokens is sent too, with empty text."""
    engine = state.engine
    offset = 0  # the length of the tokens sent so far: the next chunk's first text_offset
    async for item in stream_with_logprobs(state, request, top):
        if item is None:
            continue
        delta, ids, entries = item
        finish = delta.final.finish_reason if delta.final is not None else None
        logprobs = None
        if entries:
            logprobs = replies.completion_logprobs(engine.tokenizer, ids, entries, offset)
            offset += sum(len(token) for token in logprobs["tokens"])
        if delta.text or finish or logprobs:
            yield {
                "id": rid,
                "object": "text_completion",
                "created": int(time.time()),
                "model": model,
                "choices": [{"index": 0, "text": delta.text, "logprobs": logprobs, "finish_reason": finish}],
            }
