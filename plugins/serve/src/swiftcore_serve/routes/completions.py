"""``POST /v1/completions``: text completion of one or more prompts (text or token ids), or one streamed."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request as HttpRequest
from swiftcore_infer import InvalidRequestError, Request

from swiftcore_serve import replies
from swiftcore_serve.openapi import documented
from swiftcore_serve.protocol import CompletionRequest, CompletionResponse, sampling_from
from swiftcore_serve.routing import api_router, sse, unless_disconnected
from swiftcore_serve.state import ServeState, StateDep

__all__ = ["router"]

router = api_router()


@router.post("/v1/completions", response_model=None, responses=documented(CompletionResponse, stream=True))
async def completions(body: CompletionRequest, http: HttpRequest, state: StateDep) -> Any:
    """Complete each prompt (one engine batch), or stream the completion of a single one."""
    adapter = state.adapter_for(body.model)
    state.require_generation()
    if body.echo:
        raise InvalidRequestError("echo is not supported", param="echo")
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
        return await sse(http, _chunks(state, requests[0], rid, body.model), state.redact)
    generations = await unless_disconnected(http, state.worker.generate_many(requests))
    for g in generations:
        replies.raise_failed(g)
    usage = {
        k: sum(replies.usage(g)[k] for g in generations) for k in ("prompt_tokens", "completion_tokens", "total_tokens")
    }
    return {
        "id": rid,
        "object": "text_completion",
        "created": int(time.time()),
        "model": body.model,
        "choices": [
            {"index": i, "text": g.text, "logprobs": None, "finish_reason": g.finish_reason}
            for i, g in enumerate(generations)
        ],
        "usage": usage,
    }


async def _chunks(state: ServeState, request: Request, rid: str, model: str) -> AsyncIterator[dict[str, Any]]:
    """The ``text_completion`` chunks of a streamed completion (pieces with text, and the last one)."""
    async for delta in state.worker.stream(request):
        finish = delta.final.finish_reason if delta.final is not None else None
        if delta.text or finish:
            yield {
                "id": rid,
                "object": "text_completion",
                "created": int(time.time()),
                "model": model,
                "choices": [{"index": 0, "text": delta.text, "logprobs": None, "finish_reason": finish}],
            }
