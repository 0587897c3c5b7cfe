"""How routes read requests and answer clients who leave: strict JSON bodies, disconnects, server-sent events."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import suppress
from typing import Any, TypeVar

from fastapi import APIRouter
from fastapi.responses import StreamingResponse
from fastapi.routing import APIRoute
from pydantic_core import from_json
from starlette.requests import Request as HttpRequest
from swiftcore_infer import InferError

from swiftcore_serve.guard import error_body

__all__ = ["ClientGone", "JSONRoute", "api_router", "sse", "unless_disconnected"]

logger = logging.getLogger("swiftcore_serve")

T = TypeVar("T")


class ClientGone(Exception):
    """The client disconnected before its answer was ready (the app answers 499, which nobody reads)."""


class _JSONRequest(HttpRequest):
    """Parses bodies with pydantic's JSON parser instead of ``json.loads``.

    It refuses what ``json.loads`` lets through or crashes on: ``NaN`` and ``Infinity``, lone surrogate
    escapes (they would fail the UTF-8 encoding of any answer echoing them), invalid UTF-8, and nesting
    deeper than 200 levels (``json.loads`` recurses in C until a ``RecursionError``).
    """

    async def json(self) -> Any:
        """The body parsed once (pydantic's parser), or a ``JSONDecodeError`` FastAPI answers with a 400."""
        if not hasattr(self, "_json"):
            try:
                self._json = from_json(await self.body(), allow_inf_nan=False)
            except ValueError as exc:  # FastAPI turns this one into a 400 (json_invalid)
                raise json.JSONDecodeError(str(exc), "", 0) from None
        return self._json


class JSONRoute(APIRoute):
    """A route whose handler reads its JSON body with :class:`_JSONRequest`, documented by what it declares.

    FastAPI publishes a handler's docstring as the operation's description. The handlers' docstrings are written
    for readers of this code, so a route publishes only a description it is given: FastAPI keeps a description up
    to its first form feed, and ``"\\f"`` is none.
    """

    def __init__(self, path: str, endpoint: Callable[..., Any], *, description: str | None = None, **kw: Any) -> None:
        super().__init__(path, endpoint, description=description or "\f", **kw)

    def get_route_handler(self) -> Callable[[HttpRequest], Any]:
        """FastAPI's handler, given the request as a :class:`_JSONRequest`."""
        handler = super().get_route_handler()

        async def route(request: HttpRequest) -> Any:
            return await handler(_JSONRequest(request.scope, request.receive))

        return route


def api_router() -> APIRouter:
    """A router of :class:`JSONRoute` routes (``include_router`` keeps each route's class)."""
    return APIRouter(route_class=JSONRoute)


async def _disconnected(receive: Any) -> None:
    """Return once the client has disconnected (the request body has already been read)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def unless_disconnected(http: Any, work: Awaitable[T]) -> T:
    """Await ``work``, abandoning it (cancelled: its job leaves the queue or stops) if the client leaves.

    Raises:
        ClientGone: the client disconnected first.
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
        raise ClientGone
    return task.result()


async def sse(
    http: HttpRequest, chunks: AsyncIterator[dict[str, Any]], redact: Callable[[str], str]
) -> StreamingResponse:
    """Stream ``chunks`` as server-sent events, ending with ``data: [DONE]``.

    The first chunk is pulled before answering, so a bad request still gets a 4xx, not a broken stream; a
    client that leaves while its request waits in the queue gives its place up. An error after that is reported
    in the stream (``redact`` keeps weight directories out of it).

    Raises:
        ClientGone: the client disconnected before the first chunk.
    """
    iterator = chunks.__aiter__()
    try:
        first = await unless_disconnected(http, iterator.__anext__())
    except StopAsyncIteration:
        first = None

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
