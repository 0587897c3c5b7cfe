"""The OpenAI-compatible server behind ``swiftcore deploy`` (FastAPI + uvicorn).

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
    "EngineWorker",
    "ServerConfig",
    "StreamParser",
    "build_app",
    "serve",
]

# FastAPI is imported when a server is built, not when the plugin is listed or `deploy --help` runs.
_WHERE = {
    "ServerConfig": "config",
    "build_app": "app",
    "StreamParser": "stream_parser",
    "EngineWorker": "worker",
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
    import uvicorn

    from swiftcore_serve.app import build_app

    # No "server: uvicorn" header: an unauthenticated client learns nothing it does not need.
    uvicorn.run(build_app(engine, config), host=host, port=port, log_level=log_level, server_header=False)
