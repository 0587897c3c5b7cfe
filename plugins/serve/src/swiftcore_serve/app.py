"""The OpenAI-compatible HTTP API (FastAPI) over any swiftcore engine.

Routes: ``GET /health``, ``GET /v1/models``, ``POST /v1/chat/completions`` (streaming SSE, tools,
``chat_template_kwargs``), ``POST /v1/completions``, ``POST /v1/embeddings``, and for head checkpoints
(:class:`~swiftcore_infer.heads.HeadEngine`) ``POST /v1/rerank`` (Cohere / Jina / vLLM shape) and
``POST /v1/classify``; a head model answers chat and completions with a 400 naming its route, a generation
model answers rerank and classify with a 400 too. ``/docs``, ``/redoc`` and ``/openapi.json`` are off unless
``ServerConfig.docs`` is set, and then need the key like every route but ``/health``.

Hostile input cannot take the server down or reach a 500 (see :mod:`swiftcore_serve.guard` for what
runs before any route):

- errors use OpenAI's shape ``{"error": {"message", "type", "param", "code"}}`` with a 4xx status: a bad body
  or value 400 (invalid JSON, NaN, lone surrogates and nesting deeper than 200 levels included), a missing or
  wrong API key 401, an unknown model or route 404, a wrong method 405, a body over ``max_body_bytes`` 413,
  a foreign ``Host`` on a loopback address 421, a full queue 429 with ``Retry-After``;
- a prompt that cannot fit the model's context is refused on its length in characters (or token ids)
  before anything tokenizes it (``code: context_length_exceeded``);
- a client that disconnects abandons its request: it leaves the queue, or its generation stops.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

# Module level, not in build_app: FastAPI resolves the routes' annotations (strings here) in this module's
# namespace, and a Request parameter must resolve to be injected. protocol.py needs the serve extra already.
from starlette.requests import Request as HttpRequest
from swiftcore_infer import (
    Generation,
    InferError,
    InvalidRequestError,
    MediaPolicy,
    Request,
    SamplingParams,
    UnsupportedError,
    media_kinds,
    openai_media_parts,
    strip_media_values,
)

from swiftcore_serve.guard import RequestGuard, error_body, has_api_key
from swiftcore_serve.media_pool import MediaEncodePool
from swiftcore_serve.protocol import (
    ChatCompletionRequest,
    ChatCompletionResponse,
    ClassifyRequest,
    ClassifyResponse,
    CompletionRequest,
    CompletionResponse,
    EmbeddingRequest,
    EmbeddingResponse,
    ErrorResponse,
    HealthResponse,
    ModelList,
    RerankRequest,
    RerankResponse,
    TranscriptionResponse,
    sampling_from,
)
from swiftcore_serve.stream_parser import StreamParser, markers_for
from swiftcore_serve.worker import EngineWorker

__all__ = ["ContextLengthError", "ServerConfig", "build_app"]

logger = logging.getLogger("swiftcore_serve")

T = TypeVar("T")

#: The default request-body limit: far above any real chat request, far below what exhausts memory.
DEFAULT_MAX_BODY_BYTES = 32 * 2**20
#: Seconds a client told "queue full" (429) should wait before retrying.
RETRY_AFTER_S = 1


class ModelNotFoundError(InferError):
    """The request names a model the server does not serve."""

    status = 404
    code = "model_not_found"


class ContextLengthError(InvalidRequestError):
    """The prompt cannot fit the model's context (refused before it is tokenized where possible)."""

    code = "context_length_exceeded"


class _ClientGone(Exception):
    """The client disconnected before its answer was ready."""


@dataclass
class ServerConfig:
    """How the server runs.

    Attributes:
        model_name: the name clients pass as ``model`` for the default model (adapter or base).
        adapters: adapter name -> directory, loaded at start-up and served under their names.
        api_key: when set, every request but ``GET /health`` needs ``Authorization: Bearer <api_key>``;
            an empty string is refused (it would look like protection and be none).
        max_queue: requests that may wait for the engine before new ones get 429.
        max_batch: the most waiting requests served by one engine call (embeddings: inputs per call).
        default_max_tokens: ``max_tokens`` when a request gives none.
        max_body_bytes: the largest request body; a larger one is a 413, refused before it is read.
        docs: serve ``/docs``, ``/redoc`` and ``/openapi.json`` (they need the key like the API).
        allowed_hosts: ``Host`` names accepted on a loopback address besides localhost, 127.0.0.1 and
            [::1] (``"*"`` accepts any, switching the DNS-rebinding check off).
        max_prompt_chars: the longest prompt in characters (None: the most the model's context can hold,
            its length in tokens times the longest token in the vocabulary).
        media: what requests' images and audio may be (local files, remote URLs, limits): a
            :class:`~swiftcore_infer.media.MediaPolicy`.
        media_workers: threads that decode and encode requests with images or audio before they queue for
            the engine (:mod:`swiftcore_serve.media_pool`), so text requests do not wait for that work; 0 does it
            on the engine's thread (one thread fewer; a text request may then wait behind an image's decoding).
    """

    model_name: str
    adapters: Mapping[str, str] = field(default_factory=dict)
    api_key: str | None = None
    max_queue: int = 64
    max_batch: int = 16
    default_max_tokens: int = 256
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    docs: bool = False
    allowed_hosts: Sequence[str] = ()
    max_prompt_chars: int | None = None
    media: MediaPolicy = field(default_factory=MediaPolicy)
    media_workers: int = 2


_RETRY_AFTER = {"Retry-After": {"description": "Seconds to wait before retrying", "schema": {"type": "integer"}}}
#: The error statuses every route documents (the OpenAPI schema lists them; the fuzz test holds us to it).
_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse, "description": description, **({"headers": _RETRY_AFTER} if status == 429 else {})}
    for status, description in (
        (400, "Invalid request (body, JSON or value), or a prompt too long for the context"),
        (401, "Missing or wrong API key"),
        (404, "Unknown model or route"),
        (405, "Method not allowed on this route"),
        (413, "Request body over the server's limit"),
        (421, "Host header does not name this loopback server (DNS-rebinding defence)"),
        (429, "Queue full: retry after Retry-After seconds"),
    )
}


#: A server-sent event of a streamed reply (``stream: true``).
_SSE_EVENT = {
    "type": "object",
    "description": "data: a JSON chunk (chat.completion.chunk / text_completion), an error object, or [DONE]",
    "properties": {
        "data": {"type": "string"},
        "event": {"type": "string"},
        "id": {"type": "string"},
        "retry": {"type": "integer"},
    },
    "required": ["data"],
}


def _documented(model: type, *, stream: bool = False) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` of a route answering ``model`` (and server-sent events when ``stream`` is set)."""
    ok: dict[str, Any] = {"model": model, "description": "Success"}
    if stream:  # one schema per event: its data is a JSON chunk (or an error object), and last "[DONE]"
        ok["content"] = {"text/event-stream": {"schema": _SSE_EVENT}}
    return {200: ok, **_ERROR_RESPONSES}


def _text_chars(value: Any) -> int:
    """Characters in every string inside ``value`` (nested lists and dicts; walked without recursion)."""
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return total


class _PromptLimits:
    """Refuse prompts that cannot fit the model's context, on their length, before tokenizing them.

    A token never stands for more characters than its vocabulary entry has (byte-level BPE and SentencePiece
    entries hold at least one character per character they match), so a prompt longer than
    ``max_model_len * longest entry`` characters is over the context whatever its tokens: refusing it is
    never wrong, and the tokenizer never sees more than that bound.
    """

    def __init__(self, engine: Any, max_prompt_chars: int | None) -> None:
        self.max_model_len: int | None = getattr(engine, "max_model_len", None)
        tokenizer = getattr(engine, "tokenizer", None)
        self.vocab_size = len(tokenizer) if tokenizer is not None else None
        self.per_token = 0
        if self.max_model_len and tokenizer is not None and hasattr(tokenizer, "get_vocab"):
            self.per_token = max((len(t) for t in tokenizer.get_vocab()), default=0)
        derived = self.max_model_len * self.per_token if self.max_model_len and self.per_token else None
        self.max_chars = max_prompt_chars or derived

    def check_text(self, value: Any, param: str) -> None:
        """Refuse ``value`` (a string, or messages holding strings) when it has too many characters."""
        if self.max_chars is None:
            return
        chars = _text_chars(value)
        if chars > self.max_chars:
            context = f"the model's context of {self.max_model_len} tokens" if self.max_model_len else "this server"
            raise ContextLengthError(
                f"the {param} has {chars} characters, more than {context} can hold ({self.max_chars}); shorten it",
                param=param,
            )

    def check_ids(self, ids: Sequence[int], param: str) -> None:
        """Refuse token ids that are empty, outside the vocabulary, or more than the context holds."""
        if not ids:
            raise InvalidRequestError(f"{param} holds an empty list of token ids", param=param)
        if self.max_model_len and len(ids) > self.max_model_len:
            raise ContextLengthError(
                f"the {param} has {len(ids)} token ids, more than the model's context of {self.max_model_len} tokens",
                param=param,
            )
        if self.vocab_size is not None and any(not 0 <= t < self.vocab_size for t in ids):
            raise InvalidRequestError(f"token ids must be integers in [0, {self.vocab_size})", param=param)


async def _disconnected(receive: Any) -> None:
    """Return once the client has disconnected (the request body has already been read)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def _unless_disconnected(http: Any, work: Awaitable[T]) -> T:
    """Await ``work``, abandoning it (cancelled: its job leaves the queue or stops) if the client leaves.

    Raises:
        _ClientGone: the client disconnected first.
    """
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(http.receive))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():  # the client left (or the server is stopping): give the work up
            task.cancel()
            with suppress(asyncio.CancelledError, Exception):
                await task
        watcher.cancel()
    if task.cancelled():
        raise _ClientGone
    return task.result()


def build_app(engine: Any, config: ServerConfig) -> Any:
    """Build the FastAPI application serving ``engine``.

    Args:
        engine: a :class:`~swiftcore_infer.engine.Engine` (any backend) or a head engine.
        config: the :class:`ServerConfig`.

    Returns:
        The ``fastapi.FastAPI`` app; its ``state.worker`` is the :class:`EngineWorker` (closed on shutdown).

    Raises:
        ValueError: ``config.api_key`` is an empty string, or a limit is below 1.
    """
    from contextlib import asynccontextmanager

    from fastapi import FastAPI, File, Form
    from fastapi.exceptions import RequestValidationError
    from fastapi.openapi.utils import get_openapi
    from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
    from fastapi.routing import APIRoute
    from pydantic_core import from_json
    from starlette.exceptions import HTTPException

    if config.api_key is not None and not config.api_key.strip():
        raise ValueError("the API key is empty: give a real key, or api_key=None to serve without one")
    if config.max_body_bytes < 1:
        raise ValueError(f"max_body_bytes must be >= 1, got {config.max_body_bytes}")
    for name, path in config.adapters.items():
        engine.load_adapter(name, path)
    worker = EngineWorker(engine, max_queue=config.max_queue, max_batch=config.max_batch)
    limits = _PromptLimits(engine, config.max_prompt_chars)
    media_modalities = tuple(getattr(engine, "media_modalities", ()))
    # Only a model that takes media needs the pool; media sent to any other is refused by the engine's encode.
    media_pool = (
        MediaEncodePool(engine, workers=config.media_workers, max_waiting=config.max_queue)
        if media_modalities and config.media_workers > 0 and hasattr(engine, "encoding_tools")
        else None
    )

    async def encode_media(request: Request) -> None:
        """Encode a request with media on the pool, ahead of the engine thread (text requests skip it)."""
        if media_pool is not None and media_kinds(request.record):
            await media_pool.encode(request)

    class _JSONRequest(HttpRequest):
        """Parses bodies with pydantic's JSON parser instead of ``json.loads``.

        It refuses what ``json.loads`` lets through or crashes on: ``NaN`` and ``Infinity``, lone surrogate
        escapes (they would fail the UTF-8 encoding of any answer echoing them), invalid UTF-8, and nesting
        deeper than 200 levels (``json.loads`` recurses in C until a ``RecursionError``).
        """

        async def json(self) -> Any:
            if not hasattr(self, "_json"):
                try:
                    self._json = from_json(await self.body(), allow_inf_nan=False)
                except ValueError as exc:  # FastAPI turns this one into a 400 (json_invalid)
                    raise json.JSONDecodeError(str(exc), "", 0) from None
            return self._json

    class _Route(APIRoute):
        def get_route_handler(self) -> Any:
            handler = super().get_route_handler()

            async def route(request: HttpRequest) -> Any:
                return await handler(_JSONRequest(request.scope, request.receive))

            return route

    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        yield
        if media_pool is not None:
            media_pool.close()
        worker.close()

    app = FastAPI(
        title="swiftcore",
        lifespan=lifespan,
        docs_url="/docs" if config.docs else None,
        redoc_url="/redoc" if config.docs else None,
        openapi_url="/openapi.json" if config.docs else None,
    )
    app.router.route_class = _Route
    app.state.worker = worker
    app.state.engine = engine
    # Outermost after Starlette's error middleware: Host, key and body limit come before any route.
    app.add_middleware(
        RequestGuard,
        api_key=config.api_key,
        max_body_bytes=config.max_body_bytes,
        allowed_hosts=config.allowed_hosts,
    )
    created = int(time.time())

    # Where the weights live is nobody's business over HTTP: engine messages that name a directory
    # ("the model at /srv/ckpt is an embedding model") name the served model instead.
    paths: dict[str, str] = {}
    dirs = [(getattr(engine, "base_dir", None), config.model_name)]
    # An adapter given to the engine's constructor is served under the model's name; --lora ones under theirs.
    dirs += [(path, name if name in config.adapters else config.model_name) for name, path in engine.adapters.items()]
    for directory, name in dirs:
        if directory:
            paths.update({str(directory): name, str(Path(directory).resolve()): name})

    def redact(message: str) -> str:
        for path, name in sorted(paths.items(), key=lambda item: -len(item[0])):  # longest first: nested dirs
            message = message.replace(path, name)
        return message

    def error_response(
        message: str, status: int, param: str | None = None, code: str | None = None, headers: Any = None
    ) -> JSONResponse:
        return JSONResponse(error_body(redact(message), status, param, code), status_code=status, headers=headers)

    @app.exception_handler(InferError)
    async def on_infer_error(_: HttpRequest, exc: InferError) -> JSONResponse:
        status, code = exc.status, getattr(exc, "code", None)
        if isinstance(exc, UnsupportedError):  # a capability this deployment lacks: the request's problem
            status, code = 400, "unsupported"
        headers = {"Retry-After": str(RETRY_AFTER_S)} if status == 429 else None
        return error_response(str(exc), status, exc.param, code, headers)

    @app.exception_handler(RequestValidationError)
    async def on_validation_error(_: HttpRequest, exc: RequestValidationError) -> JSONResponse:
        problems = []
        param = None
        for err in exc.errors():
            if err.get("type") == "json_invalid":  # its loc is a character offset, not a field
                problems.append(f"body: {err.get('msg')} ({(err.get('ctx') or {}).get('error')})")
                continue
            loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
            param = param or loc or None
            problems.append(f"{loc or 'body'}: {err.get('msg')}")
        # A value that fits no branch of a union fails every branch: the first few say enough.
        shown = "; ".join(problems[:3]) + (f" (and {len(problems) - 3} more)" if len(problems) > 3 else "")
        return error_response(f"invalid request body: {shown}", 400, param)

    @app.exception_handler(HTTPException)
    async def on_http_error(request: HttpRequest, exc: HTTPException) -> JSONResponse:
        # Starlette's own errors (unknown route, wrong method, the guard's 413) in the OpenAI shape.
        message = {
            404: f"unknown route {request.method} {request.url.path}",
            405: f"{request.method} is not allowed on {request.url.path}",
        }.get(exc.status_code, str(exc.detail))
        return error_response(message, exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def on_error(_: HttpRequest, exc: Exception) -> JSONResponse:
        logger.exception("unexpected error")
        return error_response(f"internal error: {type(exc).__name__}", 500)

    def openapi() -> dict[str, Any]:
        # FastAPI documents a 422 for every body; this server answers 400 in OpenAI's shape instead.
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
            for operations in schema.get("paths", {}).values():
                for operation in operations.values():
                    operation.get("responses", {}).pop("422", None)
            components = schema.get("components", {}).get("schemas", {})
            for name in ("HTTPValidationError", "ValidationError"):
                components.pop(name, None)
            # The names this server answers to (any other is a 404): a client, or the fuzz test, sees them.
            served = [config.model_name, *engine.adapters]
            for component in components.values():
                model = component.get("properties", {}).get("model")
                if model is not None and component.get("title", "").endswith("Request"):
                    model["enum"] = served
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    def adapter_for(model: str) -> str | None:
        if model == config.model_name:
            return None  # the engine's default (its constructor adapter, or the base model)
        if model in engine.adapters:
            return model
        served = ", ".join([config.model_name, *engine.adapters])
        raise ModelNotFoundError(f"model {model!r} is not served here; available: {served}", param="model")

    @app.get("/health", response_model=None, responses=_documented(HealthResponse))
    async def health(http: HttpRequest) -> dict[str, Any]:
        if not has_api_key(http.scope.get("headers") or [], config.api_key):
            return {"status": "ok"}  # alive, and nothing more to whoever asks without the key
        return {"status": "ok", "backend": engine.backend, "model": config.model_name, "queued": worker.queued}

    @app.get("/v1/models", response_model=None, responses=_documented(ModelList))
    async def models() -> dict[str, Any]:
        # Names only: where the weights live on this machine is nobody's business over HTTP.
        names = [(config.model_name, None), *((name, config.model_name) for name in engine.adapters)]
        data = [
            {"id": name, "object": "model", "created": created, "owned_by": "swiftcore", "root": name, "parent": parent}
            for name, parent in names
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
        raise InvalidRequestError(
            f"{route} needs a {capability} head checkpoint; this server runs a generation model", param="model"
        )

    @app.post("/v1/chat/completions", response_model=None, responses=_documented(ChatCompletionResponse, stream=True))
    async def chat(body: ChatCompletionRequest, http: HttpRequest) -> Any:
        adapter = adapter_for(body.model)
        require_generation()
        record = body.record()
        if media_kinds(record):  # OpenAI's image_url / input_audio parts -> the template's parts (cheap checks)
            record = openai_media_parts(record, media_modalities, body.model, config.media)
        limits.check_text(strip_media_values(record), "messages")
        request = Request(
            record=record,
            sampling=sampling_from(body, config.default_max_tokens),
            adapter=adapter,
            request_id=f"chatcmpl-{uuid.uuid4().hex}",
            media_policy=config.media,
        )
        await encode_media(request)
        if body.stream:
            include_usage = bool((body.stream_options or {}).get("include_usage"))
            return await _sse(http, chat_chunks(request, body.model, include_usage))
        try:
            generation = await _unless_disconnected(http, worker.generate(request))
        except _ClientGone:
            return _gone()
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
                    _prompt_opens_thinking(engine, request, think_start),
                    think_start,
                    think_end,
                    tool_start,
                    content_start=getattr(engine.template, "content_start", None),
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

    @app.post("/v1/audio/transcriptions", response_model=None, responses=_documented(TranscriptionResponse))
    async def transcriptions(
        http: HttpRequest,
        # bytes, not UploadFile: the body is capped by the guard (--max-body-mb) before it is read.
        file: bytes = File(..., description="The audio: WAV (any PCM), MP3 or FLAC."),
        model: str = Form(...),
        response_format: str = Form("json", description="json, text or verbose_json"),
        temperature: float = Form(0.0, ge=0, le=2),
        language: str | None = Form(None, description="Echoed in verbose_json; the model detects the language."),
        prompt: str | None = Form(None, description="Text sent with the audio (ASR templates may ignore it)."),
    ) -> Any:
        # The OpenAI audio API: the clip becomes one user turn with an audio part, answered like a chat request
        # (the template's reply format, e.g. Qwen3-ASR's "language X<asr_text>...", parsed to the transcript).
        adapter = adapter_for(model)
        require_generation()
        if "audio" not in media_modalities:
            raise InvalidRequestError(
                f"model {model!r} does not accept audio; /v1/audio/transcriptions needs a speech model", param="model"
            )
        if response_format not in ("json", "text", "verbose_json"):
            raise InvalidRequestError(
                f"response_format {response_format!r} is not supported; use json, text or verbose_json",
                param="response_format",
            )
        policy = config.media
        data = file
        if len(data) > policy.max_item_bytes:
            raise policy.over("bytes per item", f"file: more than {policy.max_item_bytes} bytes",
                              str(policy.max_item_bytes), "--max-media-mb")  # fmt: skip
        if not data:
            raise InvalidRequestError("file: the upload is empty; send the audio file", param="file")
        content: list[dict[str, Any]] = [{"type": "audio", "audio": data, "_from": "file"}]
        if prompt:
            content.append({"type": "text", "text": prompt})
        request = Request(
            record={"messages": [{"role": "user", "content": content}]},
            sampling=SamplingParams(max_new_tokens=config.default_max_tokens, temperature=temperature),
            adapter=adapter,
            request_id=f"transcription-{uuid.uuid4().hex}",
            media_policy=policy,
        )
        await encode_media(request)
        try:
            generation = await _unless_disconnected(http, worker.generate(request))
        except _ClientGone:
            return _gone()
        _raise_failed(generation)
        text = (_message(generation).get("content") or "").strip()
        if response_format == "text":
            return PlainTextResponse(text)
        if response_format == "verbose_json":
            return {"text": text, "task": "transcribe", "language": language, "duration": _seconds(data)}
        return {"text": text}

    @app.post("/v1/completions", response_model=None, responses=_documented(CompletionResponse, stream=True))
    async def completions(body: CompletionRequest, http: HttpRequest) -> Any:
        adapter = adapter_for(body.model)
        require_generation()
        if body.echo:
            raise InvalidRequestError("echo is not supported", param="echo")
        sampling = sampling_from(body, config.default_max_tokens)
        prompts = body.prompts()
        if len(prompts) > config.max_queue:  # more than could ever be queued: a 429 would never clear
            raise InvalidRequestError(
                f"{len(prompts)} prompts in one request; this server takes at most {config.max_queue}", param="prompt"
            )
        for prompt in prompts:
            if isinstance(prompt, str):
                limits.check_text(prompt, "prompt")
            else:
                limits.check_ids(prompt, "prompt")
        rid = f"cmpl-{uuid.uuid4().hex}"
        requests = [
            Request(prompt=p, sampling=sampling, adapter=adapter, request_id=f"{rid}-{i}")
            for i, p in enumerate(prompts)
        ]
        if body.stream:
            if len(requests) != 1:
                raise InvalidRequestError("streaming takes one prompt per request", param="prompt")
            return await _sse(http, completion_chunks(requests[0], rid, body.model))
        try:
            generations = await _unless_disconnected(http, worker.generate_many(requests))
        except _ClientGone:
            return _gone()
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

    @app.post("/v1/embeddings", response_model=None, responses=_documented(EmbeddingResponse))
    async def embeddings(body: EmbeddingRequest, http: HttpRequest) -> Any:
        adapter_for(body.model)
        inputs = body.inputs()
        if head_task is None:
            require("embed", "/v1/embeddings")
            for item in inputs:
                if isinstance(item, str):
                    limits.check_text(item, "input")
                else:
                    limits.check_ids(item, "input")
        work = head_embeddings(body, inputs) if head_task is not None else generation_embeddings(body, inputs)
        try:
            vectors, tokens = await _unless_disconnected(http, work)
        except _ClientGone:
            return _gone()
        return _embedding_response(body, vectors, tokens)

    async def generation_embeddings(body: EmbeddingRequest, inputs: list[Any]) -> tuple[list[list[float]], int]:
        def run() -> tuple[list[list[float]], int]:
            # max_batch inputs per forward pass, so one request's memory is bounded like a generation batch.
            step = config.max_batch
            vectors = [v for start in range(0, len(inputs), step) for v in engine.embed(inputs[start : start + step])]
            tokens = sum(
                len(engine.tokenizer(i, add_special_tokens=False)["input_ids"]) if isinstance(i, str) else len(i)
                for i in inputs
            )
            return vectors, tokens

        vectors, tokens = await worker.call(run)
        if body.dimensions is not None:
            if not 0 < body.dimensions <= len(vectors[0]):
                raise InvalidRequestError(f"dimensions must be in [1, {len(vectors[0])}]", param="dimensions")
            vectors = [v[: body.dimensions] for v in vectors]
        return vectors, tokens

    async def head_embeddings(body: EmbeddingRequest, inputs: list[Any]) -> tuple[list[list[float]], int]:
        # The head's own pooling and normalisation; `dimensions` truncates and renormalises (Matryoshka).
        require("embed", "/v1/embeddings")
        vectors = await worker.call(lambda: engine.embed(inputs, dimensions=body.dimensions))
        tokens = await worker.call(lambda: engine.count_tokens(inputs))
        return vectors, tokens

    @app.post("/v1/rerank", response_model=None, responses=_documented(RerankResponse))
    async def rerank(body: RerankRequest, http: HttpRequest) -> Any:
        adapter_for(body.model)
        require("score", "/v1/rerank")
        documents = body.texts()

        def run() -> tuple[list[tuple[int, float]], int]:
            return engine.rerank(body.query, documents, body.top_n), engine.count_tokens([body.query, *documents])

        try:
            ranked, tokens = await _unless_disconnected(http, worker.call(run))
        except _ClientGone:
            return _gone()
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

    @app.post("/v1/classify", response_model=None, responses=_documented(ClassifyResponse))
    async def classify(body: ClassifyRequest, http: HttpRequest) -> Any:
        adapter_for(body.model)
        require("classify", "/v1/classify")
        inputs = body.inputs()

        def run() -> tuple[list[dict[str, Any]], int]:
            return engine.classify(inputs), engine.count_tokens(inputs)

        try:
            results, tokens = await _unless_disconnected(http, worker.call(run))
        except _ClientGone:
            return _gone()
        return {
            "id": f"classify-{uuid.uuid4().hex}",
            "object": "list",
            "created": int(time.time()),
            "model": body.model,
            "data": [{"index": i, **r} for i, r in enumerate(results)],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    def _gone() -> Any:
        # Nobody reads it; 499 ("client closed request", as nginx logs it) keeps the access log honest.
        return Response(status_code=499)

    async def _sse(http: HttpRequest, chunks: AsyncIterator[dict[str, Any]]) -> Any:
        # Pull the first chunk before answering, so a bad request still gets a 4xx, not a broken stream;
        # a client that leaves while its request waits in the queue gives its place up.
        iterator = chunks.__aiter__()
        try:
            first = await _unless_disconnected(http, iterator.__anext__())
        except StopAsyncIteration:
            first = None
        except _ClientGone:
            return _gone()

        async def body() -> AsyncIterator[str]:
            try:
                if first is not None:
                    yield f"data: {json.dumps(first, ensure_ascii=False)}\n\n"
                async for item in iterator:
                    yield f"data: {json.dumps(item, ensure_ascii=False)}\n\n"
            except InferError as exc:  # failed mid-stream: report it in the stream
                yield f"data: {json.dumps(error_body(redact(str(exc)), exc.status, exc.param))}\n\n"
            except Exception as exc:  # a bug, not the request: logged, and the client still gets an answer
                logger.exception("stream failed")
                yield f"data: {json.dumps(error_body(f'internal error: {type(exc).__name__}', 500))}\n\n"
            finally:
                await iterator.aclose()
            yield "data: [DONE]\n\n"

        return StreamingResponse(
            body(), media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        )

    return app


def _seconds(data: bytes) -> float | None:
    """A WAV clip's length in seconds (None for other formats: verbose_json then leaves it out)."""
    import io
    import wave

    try:
        with wave.open(io.BytesIO(data)) as clip:
            return round(clip.getnframes() / clip.getframerate(), 3)
    except (wave.Error, EOFError, ZeroDivisionError):
        return None


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
    """Whether the prompt ends inside an open thinking block (the reply starts with reasoning): decided on
    the ids the engine encodes (with the checkpoint's defaults), exactly as the non-streamed parse does.
    The engine thread has encoded the request already (its first piece came back): those ids are reused, so
    the event loop never decodes the request's media."""
    try:
        ids = request.encoded if request.encoded is not None else engine.encode(request)
        return engine.prompt_opens_thinking(ids)
    except Exception:  # the request was already encoded; this only guides streaming
        return False
