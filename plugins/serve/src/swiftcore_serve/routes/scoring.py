"""``POST /v1/rerank`` (Cohere / Jina / vLLM shape) and ``POST /v1/classify``, for head checkpoints."""

from __future__ import annotations

import time
import uuid
from typing import Any

from starlette.requests import Request as HttpRequest

from swiftcore_serve import replies
from swiftcore_serve.openapi import documented
from swiftcore_serve.protocol import ClassifyRequest, ClassifyResponse, RerankRequest, RerankResponse
from swiftcore_serve.routing import api_router, unless_disconnected
from swiftcore_serve.state import StateDep

__all__ = ["router"]

router = api_router()


@router.post("/v1/rerank", response_model=None, responses=documented(RerankResponse))
async def rerank(body: RerankRequest, http: HttpRequest, state: StateDep) -> Any:
    """The documents ranked by their relevance to the query (the ``top_n`` best, with their texts if asked)."""
    state.adapter_for(body.model)
    state.require("score", "/v1/rerank")
    engine = state.engine
    documents = body.texts()

    def run() -> tuple[list[tuple[int, float]], int]:
        return engine.rerank(body.query, documents, body.top_n), engine.count_tokens([body.query, *documents])

    ranked, tokens = await unless_disconnected(http, state.worker.call(run))
    results = []
    for index, score in ranked:
        item: dict[str, Any] = {"index": index, "relevance_score": score}
        if body.return_documents:
            item["document"] = {"text": documents[index]}
        results.append(item)
    return {
        "id": f"rerank-{uuid.uuid4().hex}",
        "model": body.model,
        "results": results,
        "usage": replies.prompt_usage(tokens),
    }


@router.post("/v1/classify", response_model=None, responses=documented(ClassifyResponse))
async def classify(body: ClassifyRequest, http: HttpRequest, state: StateDep) -> Any:
    """Each input's label and the probability of every label."""
    state.adapter_for(body.model)
    state.require("classify", "/v1/classify")
    engine = state.engine
    inputs = body.inputs()

    def run() -> tuple[list[dict[str, Any]], int]:
        return engine.classify(inputs), engine.count_tokens(inputs)

    results, tokens = await unless_disconnected(http, state.worker.call(run))
    return {
        "id": f"classify-{uuid.uuid4().hex}",
        "object": "list",
        "created": int(time.time()),
        "model": body.model,
        "data": [{"index": i, **r} for i, r in enumerate(results)],
        "usage": replies.prompt_usage(tokens),
    }
