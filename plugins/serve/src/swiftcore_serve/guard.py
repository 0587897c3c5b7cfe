"""What every request goes through before any route sees it: the Host check, the API key and the body limit.

:class:`RequestGuard` is a plain ASGI middleware (not Starlette's ``BaseHTTPMiddleware``, which would buffer
streams and hide client disconnects from the routes). It guards every server swiftcore runs: ``swiftcore deploy``,
``swiftcore rollout`` and ``swiftcore web-ui`` (one guard, on this distribution's face, so a fix reaches all three).
In order, for every HTTP request (and every WebSocket handshake, which gets the first three checks):

1. **Host** (DNS-rebinding defence): a request that arrives on a loopback address must name a loopback host
   (``localhost``, ``127.0.0.1``, ``[::1]``, any port) or one of ``allowed_hosts``; otherwise 421. A page on
   ``evil.example`` whose name an attacker re-points at 127.0.0.1 gets no further, though the browser sends
   it straight to the server.
2. **Origin** (cross-site requests; on when ``check_origin``): a request that carries an ``Origin`` header must
   come from the page's own origin (the ``Origin`` names the ``Host`` it was sent to) or from one of
   ``allowed_hosts``; otherwise 403. A page on another site the user opens can then make no request of its
   own count, whatever address the server is bound to.
3. **API key**: every path but the public ones (``/health``) needs ``Authorization: Bearer <key>`` when a key
   is set; otherwise 401. Checked on the headers alone, so an unauthenticated body is never read.
4. **Content type** (on when ``body_types`` is given): a request with a body must declare one of those types;
   otherwise 415. The types a browser form may send cross-site without asking (``text/plain``, forms) are
   never among them.
5. **Body size**: a ``Content-Length`` over the limit is a 413 at once, before one byte of the body is read;
   a chunked body is counted as it arrives and cut off with a 413 the moment it passes the limit. Both
   answers close the connection (``Connection: close``), so the rest of the body is not drained either.

Every refusal is an OpenAI-shaped error (:func:`error_body`).

Slow clients are the server's business, not this middleware's: :func:`~swiftcore_serve.listener.uvicorn_config`
times out a connection whose request headers do not arrive in time.
"""

from __future__ import annotations

import ipaddress
import json
import secrets
from collections.abc import Awaitable, Callable, Collection, Iterable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

__all__ = ["LOOPBACK_HOSTS", "PUBLIC_PATHS", "RequestGuard", "error_body", "has_api_key", "is_loopback"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

#: Host names a loopback request may carry (any port); more come from ``ServerConfig.allowed_hosts``.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
#: Paths that answer without the API key (``/health`` reveals nothing without it).
PUBLIC_PATHS = frozenset({"/health"})

_TYPES = {
    401: "authentication_error",
    404: "not_found_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "server_error",
}
_CODES = {
    401: "invalid_api_key",
    403: "cross_origin_request",
    413: "request_too_large",
    415: "unsupported_media_type",
    421: "misdirected_request",
}
#: The methods whose requests carry a body (the content-type check applies to them).
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: Error messages echo request values (a model name, a path); past this they are cut.
_MAX_MESSAGE = 2000


def error_body(message: str, status: int, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """OpenAI's error shape ``{"error": {"message", "type", "param", "code"}}`` for ``status``.

    The message is cut to a sane length and made encodable (a lone surrogate echoed from a request would
    otherwise fail the UTF-8 encoding of the answer and turn a 4xx into a 500).
    """
    if len(message) > _MAX_MESSAGE:
        message = message[:_MAX_MESSAGE] + " [...]"
    message = message.encode("utf-8", "backslashreplace").decode("utf-8")
    kind = _TYPES.get(status, "invalid_request_error" if 400 <= status < 500 else "server_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code or _CODES.get(status)}}


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address, or ``localhost``) is this machine's loopback."""
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1, a dual-stack socket's view of IPv4
    return (mapped or address).is_loopback


def has_api_key(headers: Iterable[tuple[bytes, bytes]], api_key: str | None) -> bool:
    """Whether the raw ASGI ``headers`` carry ``Authorization: Bearer <api_key>`` (always true with no key)."""
    if not api_key:
        return True
    expected = api_key.encode()
    for name, value in headers:
        if name.lower() == b"authorization" and value[:7].lower() == b"bearer ":
            # Constant time, so the key cannot be guessed byte by byte from response times.
            if secrets.compare_digest(value[7:].strip(), expected):
                return True
    return False


def _host_name(value: str) -> str | None:
    """The host part of a ``Host`` header (``[::1]:8000`` -> ``::1``), lower-cased; None when malformed."""
    value = value.strip().lower()
    if value.startswith("["):  # an IPv6 literal, maybe with a port
        end = value.find("]")
        if end < 0 or (value[end + 1 :] and not _is_port(value[end + 1 :])):
            return None
        return value[1:end]
    name, sep, port = value.rpartition(":") if value.count(":") == 1 else (value, "", "")
    if sep and not _is_port(":" + port):
        return None
    return name.rstrip(".") or None


def _is_port(text: str) -> bool:
    return text.startswith(":") and text[1:].isdigit() and len(text) <= 6


async def _send_error(send: Send, status: int, message: str, *, code: str | None = None, close: bool = False) -> None:
    body = json.dumps(error_body(message, status, code=code)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class RequestGuard:
    """The ASGI middleware described in the module docstring.

    Args:
        app: the ASGI app it guards.
        api_key: the key every non-public path needs (None: no key).
        max_body_bytes: the largest request body read.
        allowed_hosts: more ``Host`` names a loopback request may carry, and more origins' host names a request
            may come from (``"*"``: any).
        check_origin: refuse (403) a request whose ``Origin`` is not the server's own or an allowed host's.
        body_types: the content types a request with a body may declare (None: any); others get 415.
        public_paths: the paths that need no key.
        command: the command that runs the server, as refusals name it with its options.
        key_sources: where that command takes its key from, as the 401 names them.
    """

    def __init__(
        self,
        app: Any,
        *,
        api_key: str | None,
        max_body_bytes: int,
        allowed_hosts: Iterable[str] = (),
        check_origin: bool = False,
        body_types: Collection[str] | None = None,
        public_paths: Collection[str] = PUBLIC_PATHS,
        command: str = "swiftcore deploy",
        key_sources: str = "--api-key-file, SWIFTCORE_API_KEY or --api-key",
    ) -> None:
        from starlette.exceptions import HTTPException

        self.app = app
        self.api_key = api_key
        self.max_body_bytes = max_body_bytes
        extra = {h.lower().strip("[]").rstrip(".") for h in allowed_hosts}
        self.any_host = "*" in extra
        self.extra_hosts = frozenset(extra)
        self.hosts = frozenset(LOOPBACK_HOSTS) | extra
        self.check_origin = check_origin
        self.body_types = None if body_types is None else frozenset(t.lower() for t in body_types)
        self.public_paths = frozenset(public_paths)
        self.command = command
        self.key_sources = key_sources
        self._http_exception = HTTPException

    def _too_large(self) -> str:
        return (
            f"the request body is larger than this server's limit of {self.max_body_bytes / 2**20:g} MiB "
            f"({self.command} --max-body-mb)"
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
            return
        if scope["type"] != "http":  # lifespan events
            await self.app(scope, receive, send)
            return
        headers: list[tuple[bytes, bytes]] = scope.get("headers") or []
        problem = self._host_problem(scope, headers)
        if problem:
            await _send_error(send, 421, problem)
            return
        problem = self._origin_problem(headers)
        if problem:
            await _send_error(send, 403, problem)
            return
        if scope.get("path") not in self.public_paths and not has_api_key(headers, self.api_key):
            await _send_error(
                send,
                401,
                f"invalid API key: send 'Authorization: Bearer <key>' with the key {self.command} was given "
                f"({self.key_sources})",
            )
            return
        problem = self._type_problem(scope, headers)
        if problem:
            await _send_error(send, 415, problem, close=True)
            return
        declared = [value for name, value in headers if name.lower() == b"content-length"]
        if declared:
            if len(set(declared)) > 1 or not declared[0].strip().isdigit():
                await _send_error(send, 400, "malformed Content-Length header", close=True)
                return
            if int(declared[0]) > self.max_body_bytes:  # refused on the headers: the body is never read
                await _send_error(send, 413, self._too_large(), close=True)
                return
        await self._app_with_limited_body(scope, receive, send)

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A WebSocket handshake gets the Host, Origin and key checks; refused, it is closed before it is
        accepted (the client sees HTTP 403)."""
        headers: list[tuple[bytes, bytes]] = scope.get("headers") or []
        refused = (
            self._host_problem(scope, headers)
            or self._origin_problem(headers)
            or (scope.get("path") not in self.public_paths and not has_api_key(headers, self.api_key))
        )
        if refused:
            await send({"type": "websocket.close", "code": 1008})
            return
        await self.app(scope, receive, send)

    def _origin_problem(self, headers: list[tuple[bytes, bytes]]) -> str | None:
        if not self.check_origin or self.any_host:
            return None
        origins = [value for name, value in headers if name.lower() == b"origin"]
        if not origins:
            return None  # not sent by a browser on another site's behalf (browsers send Origin on every POST)
        origin = origins[0].decode("latin-1").strip()
        hosts = [value.decode("latin-1").strip().lower() for name, value in headers if name.lower() == b"host"]
        parts = urlsplit(origin.lower()) if len(origins) == 1 else None
        if parts is not None and parts.scheme in ("http", "https") and parts.netloc:
            if hosts and parts.netloc == hosts[0]:
                return None  # the page's own origin
            if _host_name(parts.netloc) in self.extra_hosts:
                return None
        return (
            f"the Origin {origin[:100]!r} is not this server's own: requests from other sites' pages are refused "
            f"(a proxy's name can be allowed with {self.command} --allowed-host NAME)"
        )

    def _type_problem(self, scope: Scope, headers: list[tuple[bytes, bytes]]) -> str | None:
        if self.body_types is None or scope.get("method") not in _BODY_METHODS:
            return None
        values = [value for name, value in headers if name.lower() == b"content-type"]
        kind = values[0].decode("latin-1").partition(";")[0].strip().lower() if len(values) == 1 else ""
        if kind in self.body_types:
            return None
        return f"Content-Type {kind or 'missing'!r}: this server takes {' or '.join(sorted(self.body_types))} bodies"

    def _host_problem(self, scope: Scope, headers: list[tuple[bytes, bytes]]) -> str | None:
        server = scope.get("server")
        if self.any_host or not server or not isinstance(server[0], str) or not is_loopback(server[0]):
            return None  # only requests that arrive on a loopback address can be DNS-rebound there
        values = [value for name, value in headers if name.lower() == b"host"]
        if not values:
            return None  # HTTP/1.0 without Host: no browser sends that, so it is no rebinding attack
        name = _host_name(values[0].decode("latin-1")) if len(values) == 1 else None
        if name is None or name not in self.hosts:
            shown = values[0].decode("latin-1")[:100]
            return (
                f"the Host header {shown!r} does not name this loopback server; use localhost, 127.0.0.1 or "
                f"[::1] (or start {self.command} with --allowed-host NAME)"
            )
        return None

    async def _app_with_limited_body(self, scope: Scope, receive: Receive, send: Send) -> None:
        received = 0
        too_large = False
        started = False

        async def limited_receive() -> Message:
            nonlocal received, too_large
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    too_large = True
                    # FastAPI re-raises an HTTPException met while reading the body, and the app's handler
                    # answers it in the OpenAI shape; the connection closes rather than drain the rest.
                    raise self._http_exception(413, self._too_large(), headers={"Connection": "close"})
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except self._http_exception:
            if not too_large or started:
                raise
        if too_large and not started:  # a route that does not turn the exception into a response
            await _send_error(send, 413, self._too_large(), close=True)
