"""``GET /health`` and ``GET /v1/models``: whether the server is up, and the model names it answers to."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request as HttpRequest

from swiftcore_serve.guard import has_api_key
from swiftcore_serve.openapi import documented
from swiftcore_serve.protocol import HealthResponse, ModelList
from swiftcore_serve.routing import api_router
from swiftcore_serve.state import StateDep

__all__ = ["router"]

router = api_router()


@router.get("/health", response_model=None, responses=documented(HealthResponse))
async def health(http: HttpRequest, state: StateDep) -> dict[str, Any]:
    """``{"status": "ok"}``; with the API key, also the backend, the model and the requests waiting."""
    config = state.config
    if not has_api_key(http.scope.get("headers") or [], config.api_key):
        return {"status": "ok"}  # alive, and nothing more to whoever asks without the key
    return {"status": "ok", "backend": state.engine.backend, "model": config.model_name, "queued": state.worker.queued}


@router.get("/v1/models", response_model=None, responses=documented(ModelList))
async def models(state: StateDep) -> dict[str, Any]:
    """The served models: the default one, then each adapter (its parent the default)."""
    # Names only: where the weights live on this machine is nobody's business over HTTP.
    default = state.config.model_name
    names = [(default, None), *((name, default) for name in state.engine.adapters)]
    created = state.created
    data = [
        {"id": name, "object": "model", "created": created, "owned_by": "swiftcore", "root": name, "parent": parent}
        for name, parent in names
    ]
    return {"object": "list", "data": data}
