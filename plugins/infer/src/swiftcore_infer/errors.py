"""Errors raised by inference engines and the OpenAI-compatible server."""

from __future__ import annotations

from swiftcore.api import SwiftcoreError

__all__ = ["BackendUnavailableError", "InferError", "InvalidRequestError", "UnsupportedError", "error_text"]


def error_text(error: BaseException) -> str:
    """What to tell a client about ``error``: its message; else the first message among its causes; else its type.

    Backends raise some errors with no message at all (a kernel's bare ``AssertionError``, an error re-raised
    from another), and an empty text tells the client nothing of what went wrong.
    """
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if str(cause).strip():
            return str(cause) if cause is error else f"{type(error).__name__}: {type(cause).__name__}: {cause}"
        cause = cause.__cause__ or cause.__context__
    return f"{type(error).__name__} (the engine gave no message)"


class InferError(SwiftcoreError):
    """Something went wrong while serving a request; the server answers with :attr:`status`.

    Attributes:
        status: the HTTP status the server answers with.
        param: the request field at fault, when there is one.
    """

    status = 500

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class InvalidRequestError(InferError, ValueError):
    """A request is invalid (bad field, unrenderable conversation, unknown adapter); it fails alone."""

    status = 400


class UnsupportedError(InferError):
    """The backend lacks a capability (embeddings on a generation-only engine, LoRA, weight updates)."""

    status = 501


class BackendUnavailableError(InferError):
    """A backend's probe says it cannot run here (package missing, no GPU); the message says why."""

    status = 503
