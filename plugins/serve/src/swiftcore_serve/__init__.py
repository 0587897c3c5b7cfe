"""The OpenAI-compatible server behind ``swiftcore deploy`` (FastAPI + uvicorn), and what every swiftcore server
shares: the request guard (:class:`RequestGuard`: Host, Origin, API key, content type, body limit), where its key
comes from (:func:`resolve_api_key`) and how uvicorn listens (:func:`run_uvicorn`: slow clients timed out).
``swiftcore rollout`` and ``swiftcore web-ui`` import these from this face rather than keep copies.

::

    from swiftcore_serve import ServerConfig, build_app, serve
    serve(engine, ServerConfig(model_name="tiny"), host="127.0.0.1", port=8000)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from swiftcore.api import lazy_exports

if TYPE_CHECKING:
    from swiftcore_serve.config import ServerConfig

__all__ = [
    "HEADER_TIMEOUT_S",
    "EngineWorker",
    "Listener",
    "RequestGuard",
    "ServerConfig",
    "StreamParser",
    "build_app",
    "checked_key",
    "is_loopback",
    "markers_for",
    "read_key_file",
    "resolve_api_key",
    "run_uvicorn",
    "serve",
    "uvicorn_config",
]

# FastAPI is imported when a server is built, not when the plugin is listed or `deploy --help` runs.
_WHERE = {
    "ServerConfig": "config",
    "build_app": "app",
    "StreamParser": "stream_parser",
    "markers_for": "stream_parser",
    "EngineWorker": "worker",
    "RequestGuard": "guard",
    "is_loopback": "guard",
    "checked_key": "keys",
    "read_key_file": "keys",
    "resolve_api_key": "keys",
    "HEADER_TIMEOUT_S": "listener",
    "Listener": "listener",
    "run_uvicorn": "listener",
    "uvicorn_config": "listener",
}
__getattr__ = lazy_exports(__name__, _WHERE)


def serve(
    engine: Any, config: ServerConfig, *, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info"
) -> None:
    """Serve ``engine`` until interrupted (SIGINT/SIGTERM stop it cleanly).

    Args:
        engine: the engine to serve.
        config: the server configuration.
        host: the address to bind; the default keeps it on this machine.
        port: the TCP port.
        log_level: uvicorn's log level.
    """
    from swiftcore_serve.app import build_app
    from swiftcore_serve.listener import run_uvicorn

    run_uvicorn(build_app(engine, config), host=host, port=port, log_level=log_level)
