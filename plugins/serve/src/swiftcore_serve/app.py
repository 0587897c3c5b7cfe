"""The OpenAI-compatible HTTP API (FastAPI) over any swiftcore engine: :func:`build_app` puts it together.

Routes (:mod:`swiftcore_serve.routes`, one module per family): ``GET /health``, ``GET /v1/models``,
``POST /v1/chat/completions`` (streaming SSE, tools, ``chat_template_kwargs``), ``POST /v1/completions``,
``POST /v1/audio/transcriptions``, ``POST /v1/embeddings``, and for head checkpoints
(:class:`~swiftcore_infer.heads.HeadEngine`) ``POST /v1/rerank`` (Cohere / Jina / vLLM shape) and
``POST /v1/classify``; a head model answers chat and completions with a 400 naming its route, a generation
model answers rerank and classify with a 400 too. ``/docs``, ``/redoc`` and ``/openapi.json`` are off unless
``ServerConfig.docs`` is set, and then need the key like every route but ``/health``.

Hostile input cannot take the server down or reach a 500 (see :mod:`swiftcore_serve.guard` for what
runs before any route):

- errors use OpenAI's shape ``{"error": {"message", "type", "param", "code"}}`` with a 4xx status
  (:mod:`swiftcore_serve.errors`): a bad body or value 400 (invalid JSON, NaN, lone surrogates and nesting deeper
  than 200 levels included: :mod:`swiftcore_serve.routing`), a missing or wrong API key 401, an unknown model or
  route 404, a wrong method 405, a body over ``max_body_bytes`` 413, a foreign ``Host`` on a loopback address 421,
  a full queue 429 with ``Retry-After``;
- a prompt that cannot fit the model's context is refused on its length in characters (or token ids)
  before anything tokenizes it (``code: context_length_exceeded``: :mod:`swiftcore_serve.limits`);
- a client that disconnects abandons its request: it leaves the queue, or its generation stops.

What the routes share (the engine, its worker, the limits, the media pool) is one
:class:`~swiftcore_serve.state.ServeState` per app, passed to each route as a FastAPI dependency.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from swiftcore_serve.config import ServerConfig
from swiftcore_serve.errors import install_error_handlers
from swiftcore_serve.guard import RequestGuard
from swiftcore_serve.limits import ContextLengthError
from swiftcore_serve.openapi import install_openapi
from swiftcore_serve.routes import ROUTERS
from swiftcore_serve.routing import JSONRoute
from swiftcore_serve.state import ServeState

# ServerConfig and ContextLengthError are named here still: this module held them before the split.
__all__ = ["ContextLengthError", "ServerConfig", "build_app"]


def _check(config: ServerConfig) -> None:
    """Refuse settings that would look like protection and be none, before the engine is touched."""
    if config.api_key is not None and not config.api_key.strip():
        raise ValueError("the API key is empty: give a real key, or api_key=None to serve without one")
    if config.max_body_bytes < 1:
        raise ValueError(f"max_body_bytes must be >= 1, got {config.max_body_bytes}")


def build_app(engine: Any, config: ServerConfig) -> FastAPI:
    """Build the FastAPI application serving ``engine``.

    Args:
        engine: a :class:`~swiftcore_infer.engine.Engine` (any backend) or a head engine.
        config: the :class:`ServerConfig`.

    Returns:
        The ``fastapi.FastAPI`` app; its ``state.worker`` is the :class:`EngineWorker` (closed on shutdown), its
        ``state.serve`` the :class:`~swiftcore_serve.state.ServeState` the routes share.

    Raises:
        ValueError: ``config.api_key`` is an empty string, or a limit is below 1.
    """
    _check(config)
    state = ServeState(engine, config)

    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        yield
        state.close()

    app = FastAPI(
        title="swiftcore",
        lifespan=lifespan,
        docs_url="/docs" if config.docs else None,
        redoc_url="/redoc" if config.docs else None,
        openapi_url="/openapi.json" if config.docs else None,
    )
    app.router.route_class = JSONRoute  # a route declared on the app itself reads bodies as strictly as the routers'
    app.state.serve = state
    app.state.worker = state.worker
    app.state.engine = engine
    # Outermost after Starlette's error middleware: Host, key and body limit come before any route.
    app.add_middleware(
        RequestGuard,
        api_key=config.api_key,
        max_body_bytes=config.max_body_bytes,
        allowed_hosts=config.allowed_hosts,
    )
    install_error_handlers(app, state.redact)
    install_openapi(app, state.served_names)
    for router in ROUTERS:
        app.include_router(router)
    return app
