"""The OpenAPI schema: what each route answers (4xx in OpenAI's shape, never FastAPI's 422) and the model names."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from swiftcore_serve.protocol import ErrorResponse

__all__ = ["documented", "install_openapi"]

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


def documented(model: type, *, stream: bool = False) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` of a route answering ``model`` (and server-sent events when ``stream`` is set)."""
    ok: dict[str, Any] = {"model": model, "description": "Success"}
    if stream:  # one schema per event: its data is a JSON chunk (or an error object), and last "[DONE]"
        ok["content"] = {"text/event-stream": {"schema": _SSE_EVENT}}
    return {200: ok, **_ERROR_RESPONSES}


def install_openapi(app: FastAPI, served_names: Callable[[], list[str]]) -> None:
    """Make ``app.openapi()`` build the schema this server keeps to, once, on first use.

    Args:
        app: the application, its routes included.
        served_names: the model names the server answers to (asked when the schema is first built).
    """

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
            served = served_names()
            for component in components.values():
                model = component.get("properties", {}).get("model")
                if model is not None and component.get("title", "").endswith("Request"):
                    model["enum"] = served
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
