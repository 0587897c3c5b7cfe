"""Every error the app answers, in OpenAI's shape ``{"error": {"message", "type", "param", "code"}}``."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException
from starlette.requests import Request as HttpRequest
from swiftcore_infer import InferError, UnsupportedError

from swiftcore_serve.guard import error_body
from swiftcore_serve.routing import ClientGone

__all__ = ["RETRY_AFTER_S", "install_error_handlers"]

logger = logging.getLogger("swiftcore_serve")

#: Seconds a client told "queue full" (429) should wait before retrying.
RETRY_AFTER_S = 1


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    """The message of a 400 for a body that fails validation, and the first field it names."""
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
    return f"invalid request body: {shown}", param


def install_error_handlers(app: FastAPI, redact: Callable[[str], str]) -> None:
    """Answer engine errors, invalid bodies, Starlette's own errors and bugs in OpenAI's shape.

    Args:
        app: the application.
        redact: rewrites a message so that it names no weight directory (:meth:`ServeState.redact`).
    """

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
        message, param = _validation_message(exc)
        return error_response(message, 400, param)

    @app.exception_handler(HTTPException)
    async def on_http_error(request: HttpRequest, exc: HTTPException) -> JSONResponse:
        # Starlette's own errors (unknown route, wrong method, the guard's 413) in the OpenAI shape.
        message = {
            404: f"unknown route {request.method} {request.url.path}",
            405: f"{request.method} is not allowed on {request.url.path}",
        }.get(exc.status_code, str(exc.detail))
        return error_response(message, exc.status_code, headers=exc.headers)

    @app.exception_handler(ClientGone)
    async def on_client_gone(_: HttpRequest, __: ClientGone) -> Response:
        # Nobody reads it; 499 ("client closed request", as nginx logs it) keeps the access log honest.
        return Response(status_code=499)

    @app.exception_handler(Exception)
    async def on_error(_: HttpRequest, exc: Exception) -> JSONResponse:
        logger.exception("unexpected error")
        return error_response(f"internal error: {type(exc).__name__}", 500)
