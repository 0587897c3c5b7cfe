"""The API's routes, one module per family; :data:`ROUTERS` in the order the app includes them.

- :mod:`.meta`: ``GET /health``, ``GET /v1/models``
- :mod:`.chat`: ``POST /v1/chat/completions`` (streamed or not)
- :mod:`.audio`: ``POST /v1/audio/transcriptions``
- :mod:`.speech`: ``POST /v1/audio/speech`` (a model whose plugin gives it a voice)
- :mod:`.completions`: ``POST /v1/completions`` (streamed or not)
- :mod:`.embeddings`: ``POST /v1/embeddings`` (generation models and embedding heads)
- :mod:`.scoring`: ``POST /v1/rerank``, ``POST /v1/classify`` (head checkpoints)

Each route takes the app's :class:`~swiftcore_serve.state.ServeState` as a dependency (``state: StateDep``).
"""

from __future__ import annotations

from swiftcore_serve.routes import audio, chat, completions, embeddings, meta, scoring, speech

__all__ = ["ROUTERS"]

# The order the routes were always declared in: the OpenAPI schema lists the paths in it.
# The speech route came later: last, so the paths listed before it keep their order.
ROUTERS = (
    meta.router,
    chat.router,
    audio.router,
    completions.router,
    embeddings.router,
    scoring.router,
    speech.router,
)
