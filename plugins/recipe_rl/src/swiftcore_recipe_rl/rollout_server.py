"""The HTTP server of ``swiftcore rollout``: one rollout engine, the policy's weights pushed into it by a trainer
(``swiftcore train --rollout-server URL``).

Routes (tensors travel as safetensors bytes, everything else as JSON; see :mod:`~swiftcore_recipe_rl.wire`):

- ``GET /health``: the model (name, directory, :func:`~swiftcore_recipe_rl.identity.checkpoint_identity`), backend,
  template, the current weight version, whether the base weights are still the checkpoint's, the loaded adapters.
- ``POST /rollouts``: ``{"requests": [{"prompt": [ids] | "record": {...}, "sampling": {...}, "adapter": NAME}]}``
  -> ``{"weight_version": N, "rollouts": [{"prompt_ids", "completion_ids", "text", ...}]}`` (the engine's
  :meth:`~swiftcore_infer.Engine.generate_rollouts`).
- ``POST /load_adapter?name=NAME``: the policy's LoRA adapter, its tensors with ``adapter_config.json`` in the
  safetensors metadata; loading the same config again only replaces the tensors (a trainer that reconnects).
- ``POST /update_adapter?name=NAME``: LoRA-only sync (peft state-dict names).
- ``POST /update_weights``: full sync, one bucket per call (the model's own parameter names).

Each successful sync bumps the weight version, which every answer carries. Every name and shape is checked against
the engine's model before anything is copied, so a refused sync leaves the weights as they were; bad requests get
HTTP 400 (409 for a sync the engine's state forbids, 413 for a body over ``--max-body-mb``) with a message naming the
problem, never a 5xx.

Why one worker thread: every engine call (encode, generate, sync) runs on it in arrival order, so a sync never
interleaves a rollout and the engine (not thread-safe) is only ever touched by one thread.
"""

# No ``from __future__ import annotations`` here: FastAPI reads the routes' ``request: Request`` annotations at run
# time, and Request is imported inside create_app (fastapi is not imported with this module).

import json
import logging
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from swiftcore_recipe_rl.wire import (
    ADAPTER_CONFIG_KEY,
    WireError,
    generation_to_json,
    request_from_json,
    tensors_from_bytes,
)

__all__ = ["RolloutService", "SyncConflictError", "create_app", "serve"]

log = logging.getLogger("swiftcore.rl.rollout")


class SyncConflictError(ValueError):
    """A sync the engine's current state forbids (answered with HTTP 409): an adapter loaded under the name with
    another config, or a LoRA adapter onto base weights a full sync replaced."""


def _canonical(config: str) -> str:
    return json.dumps(json.loads(config), sort_keys=True)


class RolloutService:
    """The engine behind the routes, and its state: the weight version and what was synced.

    Args:
        engine: a :class:`swiftcore_infer.Engine` (``update_weights`` capability).
        identity: the served checkpoint's :func:`~swiftcore_recipe_rl.identity.checkpoint_identity`.

    Attributes:
        weight_version: bumped by each successful sync (0: the checkpoint as loaded).
        base_synced: whether a full sync replaced (some of) the checkpoint's base weights.
    """

    def __init__(self, engine: Any, *, identity: dict[str, Any]) -> None:
        self.engine = engine
        self.identity = identity
        self.weight_version = 0
        self.base_synced = False
        self._adapter_configs: dict[str, str] = {}
        self._adapter_dirs: list[tempfile.TemporaryDirectory] = []  # kept while served: the engine may reread them
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="swiftcore-rollout-engine")

    async def run(self, func: Callable[..., Any], *args: Any) -> Any:
        """Run ``func(*args)`` on the engine's one thread, after every call that came before it."""
        import asyncio

        return await asyncio.get_running_loop().run_in_executor(self._worker, func, *args)

    def close(self) -> None:
        """Stop the worker thread and free the engine."""
        self._worker.shutdown(wait=True)
        self.engine.close()
        for tmp in self._adapter_dirs:
            tmp.cleanup()

    # ------------------------------------------------------------------ routes' work (on the engine thread)

    def health(self) -> dict[str, Any]:
        """What ``GET /health`` answers."""
        engine = self.engine
        return {
            "status": "ok",
            "backend": engine.backend,
            "model": {"name": engine.spec.name, "dir": str(engine.base_dir), **self.identity},
            "template": engine.template.name,
            "weight_version": self.weight_version,
            "base_weights": "synced" if self.base_synced else "checkpoint",
            "adapters": sorted(engine.adapters),
            "capabilities": sorted(engine.capabilities),
            "stop_token_ids": list(engine.stop_token_ids),
            "pad_token_id": engine.pad_token_id,
            "max_model_len": engine.max_model_len,
        }

    def rollouts(self, payload: Any) -> dict[str, Any]:
        """``POST /rollouts``: each request encoded (a bad one is named by its index), then one batch; with
        ``"logprobs": true`` each rollout also carries its sampled tokens' log-probs."""
        if not isinstance(payload, dict) or not isinstance(payload.get("requests"), list):
            raise WireError('expected {"requests": [{"prompt": [token ids], "sampling": {...}}, ...]}')
        unknown = sorted(set(payload) - {"requests", "logprobs"})
        if unknown:
            raise WireError(f"unknown field(s) {', '.join(map(repr, unknown))}; known: 'requests', 'logprobs'")
        logprobs = payload.get("logprobs", False)
        if not isinstance(logprobs, bool):
            raise WireError(f"logprobs: expected true or false, got {logprobs!r}")
        requests = [request_from_json(item, f"requests[{i}]") for i, item in enumerate(payload["requests"])]
        from swiftcore_infer import InvalidRequestError

        for index, request in enumerate(requests):
            try:
                self.engine.encode(request)
            except InvalidRequestError as exc:
                raise WireError(f"requests[{index}]: {exc}") from exc
        out = self.engine.generate_rollouts(requests, logprobs=logprobs)
        rollouts = [
            generation_to_json(generation, list(request.encoded), ids)
            for request, (generation, ids) in zip(requests, out, strict=True)
        ]
        return {"weight_version": self.weight_version, "rollouts": rollouts}

    def load_adapter(self, name: str, body: bytes) -> dict[str, Any]:
        """``POST /load_adapter``: load the policy's adapter (or, already loaded with that config, update it)."""
        tensors, metadata = tensors_from_bytes(body)
        config = metadata.get(ADAPTER_CONFIG_KEY)
        if not config:
            raise WireError(f"load_adapter: the safetensors metadata carries no {ADAPTER_CONFIG_KEY!r} (the adapter's "
                            "adapter_config.json)")  # fmt: skip
        try:
            canonical = _canonical(config)
        except ValueError as exc:
            raise WireError(f"load_adapter: {ADAPTER_CONFIG_KEY!r} is not JSON ({exc})") from exc
        if self.base_synced:
            raise SyncConflictError(
                f"load_adapter {name!r}: a full sync replaced this server's base weights (weight version "
                f"{self.weight_version}); a LoRA policy needs the checkpoint's own: restart `swiftcore rollout`"
            )
        if name in self.engine.adapters:
            if self._adapter_configs.get(name) != canonical:
                raise SyncConflictError(
                    f"load_adapter {name!r}: an adapter of that name is loaded with another config (rank, targets); "
                    "restart `swiftcore rollout` to serve this run's adapter"
                )
            return self.update_adapter(name, body)
        from safetensors.torch import save_file

        tmp = tempfile.TemporaryDirectory(prefix="swiftcore-rollout-adapter-")
        Path(tmp.name, "adapter_config.json").write_text(config, encoding="utf-8")
        save_file(tensors, str(Path(tmp.name, "adapter_model.safetensors")))
        try:
            self.engine.load_adapter(name, Path(tmp.name))
        except Exception:
            tmp.cleanup()
            raise
        self._adapter_dirs.append(tmp)
        self._adapter_configs[name] = canonical
        return self._synced(len(tensors))

    def update_adapter(self, name: str, body: bytes) -> dict[str, Any]:
        """``POST /update_adapter``: the adapter's tensors, names and shapes checked first."""
        tensors, _ = tensors_from_bytes(body)
        if name not in self.engine.adapters:
            loaded = ", ".join(map(repr, sorted(self.engine.adapters))) or "none"
            raise WireError(
                f"update_adapter: no adapter {name!r} is loaded (loaded: {loaded}); POST /load_adapter first"
            )
        _check_shapes("update_adapter", tensors, _adapter_shapes(self.engine, name), f"adapter {name!r}")
        count = self.engine.update_adapter(name, tensors)
        return self._synced(count)

    def update_weights(self, body: bytes) -> dict[str, Any]:
        """``POST /update_weights``: one bucket of the full state dict, names and shapes checked first."""
        tensors, _ = tensors_from_bytes(body)
        _check_shapes("update_weights", tensors, _weight_shapes(self.engine), "the model")
        count = self.engine.update_weights(tensors)
        self.base_synced = True
        return self._synced(count)

    def _synced(self, count: int) -> dict[str, Any]:
        self.weight_version += 1
        return {"weight_version": self.weight_version, "tensors": int(count)}


def _weight_shapes(engine: Any) -> dict[str, tuple[int, ...]] | None:
    """The engine model's parameter and buffer names -> shapes, as its ``update_weights`` looks them up (a peft
    model's ``base_layer`` names under their plain ones); None for an engine without an in-process torch model
    (vLLM: its own reload checks the names)."""
    model = getattr(engine, "model", None)
    if model is None or not hasattr(model, "named_parameters"):
        return None
    base = model.get_base_model() if hasattr(model, "peft_config") else model
    shapes = {}
    for name, tensor in [*base.named_parameters(), *base.named_buffers()]:
        shapes[name] = tuple(tensor.shape)
        shapes.setdefault(name.replace(".base_layer.", "."), tuple(tensor.shape))
    return shapes


def _adapter_shapes(engine: Any, name: str) -> dict[str, tuple[int, ...]] | None:
    """Adapter ``name``'s peft state-dict names -> shapes (None without an in-process peft model)."""
    model = getattr(engine, "model", None)
    if model is None or not hasattr(model, "peft_config"):
        return None
    from peft import get_peft_model_state_dict

    return {key: tuple(t.shape) for key, t in get_peft_model_state_dict(model, adapter_name=name).items()}


def _check_shapes(route: str, tensors: dict[str, Any], expected: dict[str, tuple[int, ...]] | None, whose: str) -> None:
    """Refuse (naming them) tensors ``whose`` has no such name or another shape for, before any is copied."""
    if not tensors:
        raise WireError(f"{route}: the safetensors file holds no tensor")
    if expected is None:
        return
    unknown = [name for name in tensors if name not in expected]
    if unknown:
        more = f" and {len(unknown) - 3} more" if len(unknown) > 3 else ""
        raise WireError(f"{route}: {whose} has no tensor {', '.join(map(repr, unknown[:3]))}{more} (names must be "
                        "its own, as the trainer's state dict names them)")  # fmt: skip
    for name, tensor in tensors.items():
        if tuple(tensor.shape) != expected[name]:
            raise WireError(f"{route}: {name!r} has shape {tuple(tensor.shape)}, {whose}'s is {expected[name]}")
        if not tensor.is_floating_point():
            raise WireError(f"{route}: {name!r} is {tensor.dtype}, not a floating-point tensor")


def _status(exc: BaseException) -> int:
    """The HTTP status of an error a route raised: 4xx for the request's fault (a capability the backend lacks
    included: the request asked for it), 500 for the engine's own."""
    from swiftcore_infer import InvalidRequestError, UnsupportedError

    if isinstance(exc, SyncConflictError):
        return 409
    if isinstance(exc, WireError | InvalidRequestError | UnsupportedError):
        return 400
    return 500


def create_app(service: RolloutService, *, max_body_bytes: int) -> Any:
    """The FastAPI app of the routes in the module docstring, over ``service``.

    Args:
        service: the engine and its state.
        max_body_bytes: the largest request body; a larger one gets HTTP 413 before it is read.
    """
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse
    from swiftcore_infer import error_text

    app = FastAPI(title="swiftcore rollout", docs_url=None, redoc_url=None, openapi_url=None)

    def error(status: int, message: str) -> Any:
        return JSONResponse({"error": {"message": message, "code": status}}, status_code=status)

    async def body_of(request: Request) -> bytes | Any:
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > max_body_bytes:
            limit = f"{max_body_bytes / 2**20:g} MiB"
            return error(413, f"the body has {int(length)} bytes, over this server's --max-body-mb ({limit}): "
                              "lower the trainer's --sync-bucket-mb or raise it")  # fmt: skip
        return await request.body()

    async def answer(route: str, func: Callable[..., Any], *args: Any) -> Any:
        try:
            return JSONResponse(await service.run(func, *args))
        except Exception as exc:
            status = _status(exc)
            if status >= 500:
                log.exception("%s failed", route)
            else:
                log.warning("%s refused: %s", route, exc)
            return error(status, error_text(exc))

    @app.get("/health")
    async def health() -> Any:
        return await answer("/health", service.health)

    @app.post("/rollouts")
    async def rollouts(request: Request) -> Any:
        body = await body_of(request)
        if not isinstance(body, bytes):
            return body
        try:
            payload = json.loads(body)
        except ValueError as exc:
            return error(400, f"/rollouts: the body is not JSON ({exc})")
        return await answer("/rollouts", service.rollouts, payload)

    async def adapter_call(request: Request, route: str, func: Callable[..., Any]) -> Any:
        """``func(name, body)`` for a route that takes an adapter's name (``?name=``) and its tensors."""
        body = await body_of(request)
        if not isinstance(body, bytes):
            return body
        name = request.query_params.get("name", "")
        if not name:
            return error(400, f"{route}: give the adapter's name (?name=policy)")
        return await answer(route, func, name, body)

    @app.post("/load_adapter")
    async def load_adapter(request: Request) -> Any:
        return await adapter_call(request, "/load_adapter", service.load_adapter)

    @app.post("/update_adapter")
    async def update_adapter(request: Request) -> Any:
        return await adapter_call(request, "/update_adapter", service.update_adapter)

    @app.post("/update_weights")
    async def update_weights(request: Request) -> Any:
        body = await body_of(request)
        if not isinstance(body, bytes):
            return body
        return await answer("/update_weights", service.update_weights, body)

    return app


def serve(engine: Any, *, host: str, port: int, log_level: str = "info", max_body_bytes: int = 2**32) -> None:
    """Serve ``engine`` on ``host:port`` until interrupted (uvicorn), then free it."""
    import uvicorn

    from swiftcore_recipe_rl.identity import checkpoint_identity

    service = RolloutService(engine, identity=checkpoint_identity(engine.base_dir))
    try:
        uvicorn.run(create_app(service, max_body_bytes=max_body_bytes), host=host, port=port, log_level=log_level)
    finally:
        service.close()
