"""The OpenAI-compatible server behind ``swiftcore deploy`` (FastAPI + uvicorn).

::

    from swiftcore.infer.server import ServerConfig, build_app, serve
    serve(engine, ServerConfig(model_name="tiny"), host="127.0.0.1", port=8000)
"""

from __future__ import annotations

from typing import Any

from swiftcore.infer.server.app import ServerConfig, build_app

__all__ = ["ServerConfig", "build_app", "serve"]


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

    # No "server: uvicorn" header: an unauthenticated client learns nothing it does not need.
    uvicorn.run(build_app(engine, config), host=host, port=port, log_level=log_level, server_header=False)
