"""``swiftcore eval --model DIR``: the model served in this process, on a loopback port, for the evaluation.

The engine is served by the same application ``swiftcore deploy`` runs (:func:`swiftcore_serve.build_app`), under
uvicorn in a background thread, behind a random API key; the evaluation then asks it over HTTP exactly as it asks
a separate server, so both ways measure the served endpoint.
"""

from __future__ import annotations

import secrets
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from swiftcore.api import SwiftcoreError

__all__ = ["InProcessServer", "serve_in_process"]

#: Seconds the in-process server may take to start listening.
START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class InProcessServer:
    """Where the in-process server listens.

    Attributes:
        api_url: the OpenAI base URL (``http://127.0.0.1:PORT/v1``).
        api_key: the key it requires (random, for this run only).
        model_name: the name it serves the model under.
    """

    api_url: str
    api_key: str
    model_name: str


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


@contextmanager
def serve_in_process(engine: Any, model_name: str, *, max_batch: int = 16) -> Iterator[InProcessServer]:
    """Serve ``engine`` on a free loopback port for the ``with`` block, then stop the server.

    Args:
        engine: a generation engine (``swiftcore_infer``'s, any backend).
        model_name: the name requests use for it.
        max_batch: waiting requests the server hands the engine together.

    Raises:
        SwiftcoreError: the server did not start.
    """
    import uvicorn
    from swiftcore_serve import ServerConfig, build_app

    host = "127.0.0.1"
    key = secrets.token_urlsafe(24)
    app = build_app(engine, ServerConfig(model_name=model_name, api_key=key, max_batch=max_batch))
    port = _free_port(host)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on", server_header=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="swiftcore-eval-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        if not thread.is_alive():
            raise SwiftcoreError(f"the in-process server did not start on {host}:{port} (see the log above)")
        if time.monotonic() > deadline:
            server.should_exit = True
            raise SwiftcoreError(f"the in-process server did not start within {START_TIMEOUT_S:.0f} s")
        time.sleep(0.02)
    try:
        yield InProcessServer(api_url=f"http://{host}:{port}/v1", api_key=key, model_name=model_name)
    finally:
        server.should_exit = True
        thread.join(30)
