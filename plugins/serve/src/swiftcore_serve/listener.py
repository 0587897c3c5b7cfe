"""How swiftcore's servers listen: uvicorn, with its timeouts and limits set on purpose, not left at defaults.

One place for ``swiftcore deploy``, ``swiftcore rollout`` and ``swiftcore web-ui`` (served on this distribution's
face with :class:`~swiftcore_serve.guard.RequestGuard`).

- **Slow headers** (slowloris): uvicorn times out an idle keep-alive connection but not one whose request headers
  trickle in a byte at a time; such connections would stay open for ever and, enough of them, exhaust the
  process's file descriptors. :class:`HeaderTimeoutProtocol` (uvicorn's h11 protocol, chosen explicitly so the
  behaviour does not depend on whether ``httptools`` is installed) closes a connection whose request headers
  are not complete :data:`HEADER_TIMEOUT_S` seconds after it opened or after its last answer.
- **Idle keep-alive**: closed after :data:`KEEP_ALIVE_S` seconds.
- **Headers' size**: at most :data:`MAX_HEADER_BYTES` bytes (h11's incomplete-event limit).
- **Graceful stop**: requests in flight get :data:`GRACEFUL_STOP_S` seconds after Ctrl-C.

Importing this module imports no uvicorn (it is imported when a server starts).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "GRACEFUL_STOP_S",
    "HEADER_TIMEOUT_S",
    "KEEP_ALIVE_S",
    "MAX_HEADER_BYTES",
    "Listener",
    "run_uvicorn",
    "uvicorn_config",
]

#: Seconds a connection may take to send a request's headers (from its opening, or from its last answer).
HEADER_TIMEOUT_S = 10.0
#: Seconds an idle keep-alive connection stays open.
KEEP_ALIVE_S = 5
#: The largest request head (request line and headers) in bytes.
MAX_HEADER_BYTES = 64 * 1024
#: Seconds requests in flight get to finish once the server is asked to stop.
GRACEFUL_STOP_S = 10


def header_timeout_protocol(header_timeout: float) -> type:
    """uvicorn's h11 protocol with a deadline on each request's headers (see the module docstring)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderTimeoutProtocol(H11Protocol):
        """Closes a connection whose next request's headers are not complete ``header_timeout`` s after it
        opened or answered its last request."""

        _header_deadline: Any = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm_header_deadline()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm_header_deadline()
            super().connection_lost(exc)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm_header_deadline()

        def _arm_header_deadline(self) -> None:
            self._disarm_header_deadline()
            self._header_deadline = self.loop.call_later(header_timeout, self._headers_too_slow)

        def _disarm_header_deadline(self) -> None:
            if self._header_deadline is not None:
                self._header_deadline.cancel()
                self._header_deadline = None

        def _headers_too_slow(self) -> None:
            self._header_deadline = None
            waiting = self.cycle is None or self.cycle.response_complete  # no request is being answered
            if waiting and self.conn.their_state in (h11.IDLE, h11.DONE) and not self.transport.is_closing():
                self.transport.close()  # its headers never completed: a slow or stalled client

    return HeaderTimeoutProtocol


def uvicorn_config(
    app: Any, *, host: str, port: int, log_level: str = "info", header_timeout: float = HEADER_TIMEOUT_S
) -> Any:
    """The ``uvicorn.Config`` every swiftcore server runs with (see the module docstring).

    No ``server: uvicorn`` header: an unauthenticated client learns nothing it does not need.
    """
    import uvicorn

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        server_header=False,
        http=header_timeout_protocol(header_timeout),
        ws="none",
        timeout_keep_alive=KEEP_ALIVE_S,
        timeout_graceful_shutdown=GRACEFUL_STOP_S,
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
    )


def run_uvicorn(app: Any, *, host: str, port: int, log_level: str = "info") -> None:
    """Serve ``app`` on ``host:port`` until interrupted, with :func:`uvicorn_config`."""
    import uvicorn

    uvicorn.Server(uvicorn_config(app, host=host, port=port, log_level=log_level)).run()


class Listener:
    """``app`` served with :func:`uvicorn_config` on a thread of its own, for a caller that keeps the main thread
    (the Web-UI, which stops its training run on Ctrl-C; tests).

    Example::

        with Listener(app, host="127.0.0.1", port=0) as url:
            httpx.get(url + "/health")

    Args:
        app: the ASGI app.
        host: the address to bind.
        port: the TCP port (0: a free one, then :attr:`port` is the one bound).
        log_level: uvicorn's log level.
        header_timeout: :data:`HEADER_TIMEOUT_S`, unless a test needs it shorter.
    """

    def __init__(
        self, app: Any, *, host: str, port: int, log_level: str = "warning", header_timeout: float = HEADER_TIMEOUT_S
    ) -> None:
        self.app, self.host, self.port = app, host, port
        self.log_level, self.header_timeout = log_level, header_timeout
        self._server: Any = None
        self._thread: Any = None

    @property
    def url(self) -> str:
        """``http://host:port`` (an IPv6 address in brackets)."""
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{shown}:{self.port}"

    def start(self, timeout: float = 30.0) -> str:
        """Start serving; the URL once the socket listens.

        Raises:
            OSError: the server did not start (the address is taken, or cannot be bound).
        """
        import socket
        import threading
        import time

        import uvicorn

        if self.port == 0:
            family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
            with socket.socket(family) as sock:
                sock.bind((self.host, 0))
                self.port = sock.getsockname()[1]
        config = uvicorn_config(
            self.app, host=self.host, port=self.port, log_level=self.log_level, header_timeout=self.header_timeout
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="swiftcore-listener", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise OSError(f"could not serve on {self.url} (is the port taken?)")
            time.sleep(0.02)
        return self.url

    def wait(self) -> None:
        """Block until the server stops (Ctrl-C in the main thread interrupts the wait)."""
        while self._thread is not None and self._thread.is_alive():
            self._thread.join(0.5)

    def stop(self) -> None:
        """Stop serving (requests in flight get :data:`GRACEFUL_STOP_S` seconds)."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(GRACEFUL_STOP_S + 5)

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
