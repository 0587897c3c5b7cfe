"""``POST /v1/embeddings``: vectors from a generation model's hidden states, or from an embedding head."""

from __future__ import annotations

import base64
from typing import Any

from starlette.requests import Request as HttpRequest
from swiftcore_infer import InvalidRequestError

from swiftcore_serve import replies
from swiftcore_serve.openapi import documented
from swiftcore_serve.protocol import EmbeddingRequest, EmbeddingResponse
from swiftcore_serve.routing import api_router, unless_disconnected
from swiftcore_serve.state import ServeState, StateDep

__all__ = ["router"]

router = api_router()

_ROUTE = "/v1/embeddings"


@router.post(_ROUTE, response_model=None, responses=documented(EmbeddingResponse))
async def embeddings(body: EmbeddingRequest, http: HttpRequest, state: StateDep) -> Any:
    """Embed each input (texts or token ids), in OpenAI's shape (floats or base64)."""
    state.adapter_for(body.model)
    inputs = body.inputs()
    if state.head_task is None:
        state.require("embed", _ROUTE)
        state.limits.check_prompts(inputs, "input")
    work = _head(state, body, inputs) if state.head_task is not None else _generation(state, body, inputs)
    vectors, tokens = await unless_disconnected(http, work)
    return {
        "object": "list",
        "model": body.model,
        "data": [
            {"object": "embedding", "index": i, "embedding": _encode_vector(v, body.encoding_format)}
            for i, v in enumerate(vectors)
        ],
        "usage": replies.prompt_usage(tokens),
    }


async def _generation(state: ServeState, body: EmbeddingRequest, inputs: list[Any]) -> tuple[list[list[float]], int]:
    """A generation model's vectors (``dimensions`` truncates them) and the inputs' token count."""
    engine = state.engine

    def run() -> tuple[list[list[float]], int]:
        # max_batch inputs per forward pass, so one request's memory is bounded like a generation batch.
        step = state.config.max_batch
        vectors = [v for start in range(0, len(inputs), step) for v in engine.embed(inputs[start : start + step])]
        tokens = sum(
            len(engine.tokenizer(i, add_special_tokens=False)["input_ids"]) if isinstance(i, str) else len(i)
            for i in inputs
        )
        return vectors, tokens

    vectors, tokens = await state.worker.call(run)
    if body.dimensions is not None:
        if not 0 < body.dimensions <= len(vectors[0]):
            raise InvalidRequestError(f"dimensions must be in [1, {len(vectors[0])}]", param="dimensions")
        vectors = [v[: body.dimensions] for v in vectors]
    return vectors, tokens


async def _head(state: ServeState, body: EmbeddingRequest, inputs: list[Any]) -> tuple[list[list[float]], int]:
    """An embedding head's vectors and the inputs' token count."""
    # The head's own pooling and normalisation; `dimensions` truncates and renormalises (Matryoshka).
    state.require("embed", _ROUTE)
    engine = state.engine
    vectors = await state.worker.call(lambda: engine.embed(inputs, dimensions=body.dimensions))
    tokens = await state.worker.call(lambda: engine.count_tokens(inputs))
    return vectors, tokens


def _encode_vector(vector: list[float], encoding_format: str) -> Any:
    """``vector`` as floats, or as base64 of its float32 bytes (``encoding_format: base64``)."""
    if encoding_format == "float":
        return vector
    import numpy as np

    return base64.b64encode(np.asarray(vector, dtype=np.float32).tobytes()).decode("ascii")
