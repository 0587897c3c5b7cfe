"""The OpenAI-compatible HTTP API (FastAPI) over any swiftcore engine.

Routes: ``GET /health``, ``GET /v1/models``, ``POST /v1/chat/completions`` (streaming SSE, tools,
``chat_template_kwargs``), ``POST /v1/completions``, ``POST /v1/embeddings``, and for head checkpoints
(:class:`~swiftcore.infer.heads.HeadEngine`) ``POST /v1/rerank`` (Cohere / Jina / vLLM shape) and
``POST /v1/classify``; a head model answers chat and completions with a 400 naming its route. Errors use OpenAI's shape
``{"error": {"message", "type", "param", "code"}}``: a bad body or value is a 400, a wrong API key a 401,
an unknown model a 404, a full queue a 429, a missing backend capability a 501. A request never
takes the server down.
"""

from __future__ import annotations

import base64
import json
import logging
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from swiftcore.infer.errors import InferError, InvalidRequestError, UnsupportedError
from swiftcore.infer.server.protocol import (
    ChatCompletionRequest,
    ClassifyRequest,
    CompletionRequest,
    EmbeddingRequest,
    RerankRequest,
    sampling_from,
)
from swiftcore.infer.server.stream_parser import StreamParser, markers_for
from swiftcore.infer.server.worker import EngineWorker
from swiftcore.infer.types import Generation, Request

__all__ = ["ServerConfig", "build_app"]

logger = logging.getLogger("swiftcore.infer.server")


class ModelNotFoundError(InferError):
    """The request names a model the server does not serve."""

    status = 404


class AuthError(InferError):
    """Missing or wrong API key."""

    status = 401


@dataclass
class ServerConfig:
    """How the server runs.

    Attributes:
        model_name: the name clients pass as ``model`` for the default model (adapter or base).
        adapters: adapter name -> directory, loaded at start-up and served under their names.
        api_key: when set, every ``/v1`` request needs ``Authorization: Bearer <api_key>``.
        max_queue: requests that may wait for the engine before new ones get 429.
        max_batch: the most waiting requests served by one engine call.
        default_max_tokens: ``max_tokens`` when a request gives none.
    """

    model_name: str
    adapters: Mapping[str, str] = field(default_factory=dict)
    api_key: str | None = None
    max_queue: int = 64
    max_batch: int = 16
    default_max_tokens: int = 256


def _error_body(message: str, status: int, param: str | None = None) -> dict[str, Any]:
    kind = {
        400: "invalid_request_error",
        401: "authentication_error",
        404: "not_found_error",
        429: "rate_limit_error",
        501: "not_implemented_error",
    }.get(status, "server_error")
    code = {401: "invalid_api_key", 404: "model_not_found"}.get(status)
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def build_app(engine: Any, config: ServerConfig) -> Any:
    """Build the FastAPI application serving ``engine``.

    Args:
        engine: a :class:`~swiftcore.infer.engine.Engine` (any backend).
        config: the :class:`ServerConfig`.

    Returns:
        The ``fastapi.FastAPI`` app; its ``state.worker`` is the :class:`EngineWorker` (closed on shutdown).
    """
    from contextlib import asynccontextmanager

    from fastapi import FastAPI
    from fastapi import Request as HttpRequest
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, StreamingResponse

    for name, path in config.adapters.items():
        engine.load_adapter(name, path)
    worker = EngineWorker(engine, max_queue=config.max_queue, max_batch=config.max_batch)

    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        yield
        worker.close()

    app = FastAPI(title="swiftcore", lifespan=lifespan)
    app.state.worker = worker
    app.state.engine = engine
    created = int(time.time())

    def error_response(exc: InferError) -> JSONResponse:
        return JSONResponse(_error_body(str(exc), exc.status, exc.param), status_code=exc.status)

    @app.exception_handler(InferError)
    async def on_infer_error(_: HttpRequest, exc: InferError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def on_validation_error(_: HttpRequest, exc: RequestValidationError) -> JSONResponse:
        problems = []
        param = None
        for err in exc.errors():
            loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
            param = param or loc or None
            problems.append(f"{loc or 'body'}: {err.get('msg')}")
        message = "invalid request body: " + "; ".join(problems)
        return JSONResponse(_error_body(message, 400, param), status_code=400)

    @app.exception_handler(Exception)
    async def on_error(_: HttpRequest, exc: Exception) -> JSONResponse:
        logger.exception("unexpected error")
        return JSONResponse(_error_body(f"internal error: {type(exc).__name__}: {exc}", 500), status_code=500)

    @app.middleware("http")
    async def check_api_key(request: HttpRequest, call_next: Any) -> Any:
        if config.api_key and request.url.path.startswith("/v1"):
            header = request.headers.get("authorization", "")
            token = header[7:] if header.lower().startswith("bearer ") else ""
            if not secrets.compare_digest(token.encode(), config.api_key.encode()):
                return error_response(
                    AuthError(
                        "invalid API key: send 'Authorization: Bearer <key>' with the key "
                        "given to swiftcore deploy --api-key"
                    )
                )
        return await call_next(request)

    def adapter_for(model: str) -> str | None:
        if model == config.model_name:
            return None  # the engine's default (its constructor adapter, or the base model)
        if model in engine.adapters:
            return model
        served = ", ".join([config.model_name, *engine.adapters])
        raise ModelNotFoundError(f"model {model!r} is not served here; available: {served}")

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "backend": engine.backend, "model": config.model_name, "queued": worker.queued}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        data = [
            {
                "id": config.model_name,
                "object": "model",
                "created": created,
                "owned_by": "swiftcore",
                "root": str(engine.base_dir),
                "parent": None,
            }
        ]
        data += [
            {
                "id": name,
                "object": "model",
                "created": created,
                "owned_by": "swiftcore",
                "root": str(path),
                "parent": config.model_name,
            }
            for name, path in engine.adapters.items()
        ]
        return {"object": "list", "data": data}

    head_task = getattr(engine, "head_task", None)

    def require_generation() -> None:
        if head_task is not None:  # an embedding / reranker / classifier: say where to go instead
            raise InvalidRequestError(engine.not_for("chat or completions"), param="model")

    def require(capability: str, route: str) -> None:
        if capability in engine.capabilities:
            return
        if head_task is not None:
            raise InvalidRequestError(engine.not_for(route), param="model")
        raise UnsupportedError(f"{route} needs a {capability} head checkpoint; this server runs a generation model")

    @app.post("/v1/chat/completions")
    async def chat(body: ChatCompletionRequest) -> Any:
        adapter_for(body.model)
        require_generation()
        request = Request(
            record=body.record(),
            sampling=sampling_from(body, config.default_max_tokens),
            adapter=adapter_for(body.model),
            request_id=f"chatcmpl-{uuid.uuid4().hex}",
        )
        if body.stream:
            include_usage = bool((body.stream_options or {}).get("include_usage"))
            return await _sse(chat_chunks(request, body.model, include_usage))
        generation = await worker.generate(request)
        _raise_failed(generation)
        return {
            "id": request.request_id,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.model,
            "choices": [
                {
                    "index": 0,
                    "message": _message(generation),
                    "logprobs": None,
                    "finish_reason": _finish_reason(generation),
                }
            ],
            "usage": _usage(generation),
        }

    async def chat_chunks(request: Request, model: str, include_usage: bool) -> AsyncIterator[dict[str, Any]]:
        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {
                "id": request.request_id,
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": model,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
            }

        think_start, think_end, tool_start = markers_for(engine.template)
        parser: StreamParser | None = None
        async for delta in worker.stream(request):
            if parser is None:  # first delta: the request was accepted
                parser = StreamParser(
                    _prompt_opens_thinking(engine, request, think_start), think_start, think_end, tool_start
                )
                yield chunk({"role": "assistant", "content": ""})
            for name, text in parser.feed(delta.text):
                yield chunk({name: text})
            if delta.final is not None:
                for name, text in parser.flush():
                    yield chunk({name: text})
                final = delta.final
                calls = _tool_calls(final)
                if calls:
                    yield chunk({"tool_calls": [{"index": i, **c} for i, c in enumerate(calls)]})
                yield chunk({}, _finish_reason(final))
                if include_usage:
                    yield {
                        "id": request.request_id,
                        "object": "chat.completion.chunk",
                        "created": int(time.time()),
                        "model": model,
                        "choices": [],
                        "usage": _usage(final),
                    }

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest) -> Any:
        adapter_for(body.model)
        require_generation()
        if body.echo:
            raise InvalidRequestError("echo is not supported", param="echo")
        sampling = sampling_from(body, config.default_max_tokens)
        adapter = adapter_for(body.model)
        prompts = body.prompts()
        rid = f"cmpl-{uuid.uuid4().hex}"
        requests = [
            Request(prompt=p, sampling=sampling, adapter=adapter, request_id=f"{rid}-{i}")
            for i, p in enumerate(prompts)
        ]
        if body.stream:
            if len(requests) != 1:
                raise InvalidRequestError("streaming takes one prompt per request", param="prompt")
            return await _sse(completion_chunks(requests[0], rid, body.model))
        import asyncio

        generations = await asyncio.gather(*(worker.generate(r) for r in requests))
        for g in generations:
            _raise_failed(g)
        usage = {
            k: sum(_usage(g)[k] for g in generations) for k in ("prompt_tokens", "completion_tokens", "total_tokens")
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

    async def completion_chunks(request: Request, rid: str, model: str) -> AsyncIterator[dict[str, Any]]:
        async for delta in worker.stream(request):
            finish = delta.final.finish_reason if delta.final is not None else None
            if delta.text or finish:
                yield {
                    "id": rid,
                    "object": "text_completion",
                    "created": int(time.time()),
                    "model": model,
                    "choices": [{"index": 0, "text": delta.text, "logprobs": None, "finish_reason": finish}],
                }

    @app.post("/v1/embeddings")
    async def embeddings(body: EmbeddingRequest) -> Any:
        adapter_for(body.model)
        inputs = body.inputs()
        if head_task is not None:
            return await head_embeddings(body, inputs)
        vectors = await worker.call(lambda: engine.embed(inputs))
        if body.dimensions is not None:
            if not 0 < body.dimensions <= len(vectors[0]):
                raise InvalidRequestError(f"dimensions must be in [1, {len(vectors[0])}]", param="dimensions")
            vectors = [v[: body.dimensions] for v in vectors]
        tokens = sum(
            len(engine.tokenizer(i, add_special_tokens=False)["input_ids"]) if isinstance(i, str) else len(i)
            for i in inputs
        )
        return _embedding_response(body, vectors, tokens)

    async def head_embeddings(body: EmbeddingRequest, inputs: list[Any]) -> dict[str, Any]:
        # The head's own pooling and normalisation; `dimensions` truncates and renormalises (Matryoshka).
        require("embed", "/v1/embeddings")
        vectors = await worker.call(lambda: engine.embed(inputs, dimensions=body.dimensions))
        tokens = await worker.call(lambda: engine.count_tokens(inputs))
        return _embedding_response(body, vectors, tokens)

    @app.post("/v1/rerank")
    async def rerank(body: RerankRequest) -> Any:
        adapter_for(body.model)
        require("score", "/v1/rerank")
        documents = body.texts()
        ranked = await worker.call(lambda: engine.rerank(body.query, documents, body.top_n))
        tokens = await worker.call(lambda: engine.count_tokens([body.query, *documents]))
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
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    @app.post("/v1/classify")
    async def classify(body: ClassifyRequest) -> Any:
        adapter_for(body.model)
        require("classify", "/v1/classify")
        inputs = body.inputs()
        results = await worker.call(lambda: engine.classify(inputs))
        tokens = await worker.call(lambda: engine.count_tokens(inputs))
        return {
            "id": f"classify-{uuid.uuid4().hex}",
            "object": "list",
            "created": int(time.time()),
            "model": body.model,
            "data": [{"index": i, **r} for i, r in enumerate(results)],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    async def _sse(chunks: AsyncIterator[dict[str, Any]]) -> Any:
        # Pull the first chunk before answering, so a bad request still gets a 4xx, not a broken stream.
        iterator = chunks.__aiter__()
        try:
            first = await iterator.__anext__()
        except StopAsyncIteration:
            first = None

        async def body() -> AsyncIterator[str]:
            try:
                if first is not None:
                    yield f"data: {json.dumps(first, ensure_ascii=False)}\n\n"
                async for item in iterator:
                    yield f"data: {json.dumps(item, ensure_ascii=False)}\n\n"
            except InferError as exc:  # failed mid-stream: report it in the stream
                yield f"data: {json.dumps(_error_body(str(exc), exc.status, exc.param))}\n\n"
            finally:
                await iterator.aclose()
            yield "data: [DONE]\n\n"

        return StreamingResponse(
            body(), media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        )

    return app


def _raise_failed(generation: Generation) -> None:
    if generation.error is not None:
        error = InferError(generation.error)
        error.status = generation.error_status or 500
        raise error


def _tool_calls(generation: Generation) -> list[dict[str, Any]]:
    return [
        {
            "id": call.get("id") or f"call_{uuid.uuid4().hex[:24]}",
            "type": "function",
            "function": call.get("function", call),
        }
        for call in (generation.tool_calls or [])
    ]


def _message(generation: Generation) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": generation.content}
    if generation.reasoning_content is not None:
        message["reasoning_content"] = generation.reasoning_content
    calls = _tool_calls(generation)
    if calls:
        message["tool_calls"] = calls
    return message


def _finish_reason(generation: Generation) -> str:
    return "tool_calls" if generation.tool_calls and generation.finish_reason == "stop" else generation.finish_reason


def _usage(generation: Generation) -> dict[str, int]:
    return {
        "prompt_tokens": generation.prompt_tokens,
        "completion_tokens": generation.completion_tokens,
        "total_tokens": generation.prompt_tokens + generation.completion_tokens,
    }


def _embedding_response(body: Any, vectors: list[list[float]], tokens: int) -> dict[str, Any]:
    """The OpenAI ``/v1/embeddings`` response body for ``vectors`` (one per input, in order)."""
    return {
        "object": "list",
        "model": body.model,
        "data": [
            {"object": "embedding", "index": i, "embedding": _encode_vector(v, body.encoding_format)}
            for i, v in enumerate(vectors)
        ],
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def _encode_vector(vector: list[float], encoding_format: str) -> Any:
    if encoding_format == "float":
        return vector
    import numpy as np

    return base64.b64encode(np.asarray(vector, dtype=np.float32).tobytes()).decode("ascii")


def _prompt_opens_thinking(engine: Any, request: Request, think_start: str) -> bool:
    """Whether the rendered prompt ends inside an open thinking block (the reply starts with reasoning)."""
    try:
        prompt = engine.template.render(request.record, add_generation_prompt=True)
    except Exception:  # the request was already encoded; this only guides streaming
        return False
    return prompt.rstrip().endswith(think_start)
