"""What every route shares (:class:`ServeState`), and the dependency that hands it to a route.

The routes live in modules of their own (:mod:`swiftcore_serve.routes`); each declares ``state: StateDep`` and
FastAPI passes it the app's one :class:`ServeState`, so no route closes over ``build_app``'s locals.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends
from starlette.requests import Request as HttpRequest
from swiftcore_infer import InferError, InvalidRequestError, Request, media_kinds

from swiftcore_serve.config import ServerConfig
from swiftcore_serve.limits import PromptLimits
from swiftcore_serve.media_pool import MediaEncodePool
from swiftcore_serve.worker import EngineWorker

__all__ = ["ModelNotFoundError", "ServeState", "StateDep", "serve_state"]


class ModelNotFoundError(InferError):
    """The request names a model the server does not serve."""

    status = 404
    code = "model_not_found"


def _weight_dirs(engine: Any, config: ServerConfig) -> dict[str, str]:
    """Directory (as given and resolved) -> the model name it is served under."""
    dirs = [(getattr(engine, "base_dir", None), config.model_name)]
    # An adapter given to the engine's constructor is served under the model's name; --lora ones under theirs.
    dirs += [(path, name if name in config.adapters else config.model_name) for name, path in engine.adapters.items()]
    paths: dict[str, str] = {}
    for directory, name in dirs:
        if directory:
            paths.update({str(directory): name, str(Path(directory).resolve()): name})
    return paths


class ServeState:
    """The engine being served and what the routes need around it, made once per app.

    Building it loads ``config.adapters`` into the engine and starts the engine's worker thread (and, for a model
    that takes images or audio, the media encoding pool); :meth:`close` stops them.

    Args:
        engine: a :class:`~swiftcore_infer.Engine` (any backend) or a head engine.
        config: the :class:`~swiftcore_serve.config.ServerConfig`.
    """

    def __init__(self, engine: Any, config: ServerConfig) -> None:
        for name, path in config.adapters.items():
            engine.load_adapter(name, path)
        self.engine = engine
        self.config = config
        self.worker = EngineWorker(engine, max_queue=config.max_queue, max_batch=config.max_batch)
        self.limits = PromptLimits(engine, config.max_prompt_chars)
        self.media_modalities: tuple[str, ...] = tuple(getattr(engine, "media_modalities", ()))
        # Only a model that takes media needs the pool; media sent to any other is refused by the engine's encode.
        self.media_pool = (
            MediaEncodePool(engine, workers=config.media_workers, max_waiting=config.max_queue)
            if self.media_modalities and config.media_workers > 0 and hasattr(engine, "encoding_tools")
            else None
        )
        #: Set for an embedding / reranker / classifier checkpoint (a head engine); None for a generation model.
        self.head_task: str | None = getattr(engine, "head_task", None)
        self.created = int(time.time())
        # Where the weights live is nobody's business over HTTP: engine messages that name a directory
        # ("the model at /srv/ckpt is an embedding model") name the served model instead.
        self._paths = _weight_dirs(engine, config)

    def redact(self, message: str) -> str:
        """``message`` with every weight directory replaced by the name its model is served under."""
        for path, name in sorted(self._paths.items(), key=lambda item: -len(item[0])):  # longest first: nested dirs
            message = message.replace(path, name)
        return message

    def served_names(self) -> list[str]:
        """The names clients may pass as ``model``: the default model's, then each adapter's."""
        return [self.config.model_name, *self.engine.adapters]

    def adapter_for(self, model: str) -> str | None:
        """The adapter serving ``model`` (None: the engine's default, its constructor adapter or the base).

        Raises:
            ModelNotFoundError: the server does not serve ``model`` (a 404).
        """
        if model == self.config.model_name:
            return None
        if model in self.engine.adapters:
            return model
        served = ", ".join(self.served_names())
        raise ModelNotFoundError(f"model {model!r} is not served here; available: {served}", param="model")

    def require_generation(self) -> None:
        """Refuse generation (chat, completions, transcription) on a head checkpoint, naming its route.

        Raises:
            InvalidRequestError: the engine is a head engine.
        """
        if self.head_task is not None:  # an embedding / reranker / classifier: say where to go instead
            raise InvalidRequestError(self.engine.not_for("chat or completions"), param="model")

    def require(self, capability: str, route: str) -> None:
        """Refuse ``route`` unless the engine has ``capability`` (``embed``, ``score``, ``classify``).

        Raises:
            InvalidRequestError: a head engine of another task (naming its route), or a generation model
                asked for what only a head checkpoint does.
        """
        if capability in self.engine.capabilities:
            return
        if self.head_task is not None:
            raise InvalidRequestError(self.engine.not_for(route), param="model")
        raise InvalidRequestError(
            f"{route} needs a {capability} head checkpoint; this server runs a generation model", param="model"
        )

    async def encode_media(self, request: Request) -> None:
        """Encode a request with media on the pool, ahead of the engine thread (text requests skip it)."""
        if self.media_pool is not None and media_kinds(request.record):
            await self.media_pool.encode(request)

    def close(self) -> None:
        """Stop the media pool, then the engine's worker (waiting requests fail as the server shuts down)."""
        if self.media_pool is not None:
            self.media_pool.close()
        self.worker.close()


async def serve_state(http: HttpRequest) -> ServeState:
    """The app's :class:`ServeState` (a FastAPI dependency; async, so it runs without a thread hop)."""
    return http.app.state.serve


#: A route's parameter ``state: StateDep`` receives the app's :class:`ServeState`.
StateDep = Annotated[ServeState, Depends(serve_state)]
