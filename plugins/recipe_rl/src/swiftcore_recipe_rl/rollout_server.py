"""The HTTP server of ``swiftcore rollout``: one rollout engine, the policy's weights pushed into it by a trainer
(``swiftcore train --rollout-server URL``).

Routes (tensors travel as safetensors bytes, everything else as JSON; see :mod:`~swiftcore_recipe_rl.wire`):

- ``GET /health``: the model (name, :func:`~swiftcore_recipe_rl.identity.checkpoint_identity`; never its directory),
  backend, template, the current weight version, whether the base weights are still the checkpoint's, the loaded
  adapters, the most requests one ``/rollouts`` call may carry.
- ``POST /rollouts``: ``{"requests": [{"prompt": [ids] | "record": {...}, "sampling": {...}, "adapter": NAME}]}``
  -> ``{"weight_version": N, "rollouts": [{"prompt_ids", "completion_ids", "text", ...}]}`` (the engine's
  :meth:`~swiftcore_infer.Engine.generate_rollouts`).
- ``POST /load_adapter?name=NAME``: the policy's LoRA adapter, its tensors with ``adapter_config.json`` in the
  safetensors metadata; loading the same config again only replaces the tensors (a trainer that reconnects).
- ``POST /update_adapter?name=NAME``: LoRA-only sync (peft state-dict names).
- ``POST /update_weights``: full sync, one bucket per call (the model's own parameter names).

Each successful sync bumps the weight version, which every answer carries. Every name, shape and value (finite) is
checked against the engine's model before anything is copied, so a refused sync leaves the weights as they were; bad
requests get HTTP 400 (409 for a sync the engine's state forbids, 413 for a body over ``--max-body-mb``) with a message
naming the problem, never a 5xx; an answer never names a path of the server's.

Who may call (the shared :class:`swiftcore_serve.RequestGuard`, as ``swiftcore deploy``): every route, ``/health``
included, needs the API key unless the server runs with ``--no-api-key`` on a loopback address; a loopback server
answers only requests naming a loopback ``Host`` (DNS rebinding), requests from another site's page (``Origin``) are
refused, bodies must be ``application/json`` (``/rollouts``) or ``application/octet-stream`` (tensors), and the body
limit holds while a chunked body arrives. Media a rollout's record names are read only from ``--media-root``, with
deploy's rules (:class:`swiftcore_infer.MediaPolicy`).

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

__all__ = ["KEY_ENV", "RolloutService", "SyncConflictError", "create_app", "default_max_body_bytes", "serve"]

log = logging.getLogger("swiftcore.rl.rollout")

#: The environment variable that may hold the rollout server's key (both ends read it; a file is the other way).
KEY_ENV = "SWIFTCORE_ROLLOUT_KEY"
#: The body types the server reads: JSON (``/rollouts``) and safetensors bytes (the syncs). A browser may send
#: neither to another site without asking it first (CORS), and this server never says yes.
_JSON, _TENSORS = "application/json", "application/octet-stream"
#: The prefix of the temporary folders loaded adapters are kept in.
_ADAPTER_PREFIX = "swiftcore-rollout-adapter-"


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
        media: the :class:`~swiftcore_infer.MediaPolicy` rollouts' media are held to (an HTTP server's); None for a
            caller in the trainer's own trust (the Ray worker), whose records' files are read as training reads them.
        max_requests: the most requests one ``/rollouts`` call may carry (None: no limit).

    Attributes:
        weight_version: bumped by each successful sync (0: the checkpoint as loaded).
        base_synced: whether a full sync replaced (some of) the checkpoint's base weights.
    """

    def __init__(
        self, engine: Any, *, identity: dict[str, Any], media: Any = None, max_requests: int | None = None
    ) -> None:
        self.engine = engine
        self.identity = identity
        self.media = media
        self.max_requests = max_requests
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
            "model": {"name": engine.spec.name, **self.identity},
            "template": engine.template.name,
            "weight_version": self.weight_version,
            "base_weights": "synced" if self.base_synced else "checkpoint",
            "adapters": sorted(engine.adapters),
            "capabilities": sorted(engine.capabilities),
            "stop_token_ids": list(engine.stop_token_ids),
            "pad_token_id": engine.pad_token_id,
            "max_model_len": engine.max_model_len,
            "max_requests_per_call": self.max_requests,
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
        if self.max_requests is not None and len(payload["requests"]) > self.max_requests:
            raise WireError(f"{len(payload['requests'])} requests in one call, over this server's limit of "
                            f"{self.max_requests} (swiftcore rollout --max-requests-per-call): split them")  # fmt: skip
        requests = [request_from_json(item, f"requests[{i}]") for i, item in enumerate(payload["requests"])]
        from swiftcore_infer import InvalidRequestError

        for index, request in enumerate(requests):
            try:
                if self.media is not None and request.record is not None:
                    request.record = _media_checked(request.record, self.media)
                    request.media_policy = self.media
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
        _check_finite("load_adapter", tensors)
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

        tmp = tempfile.TemporaryDirectory(prefix=_ADAPTER_PREFIX)
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
        _check_finite("update_adapter", tensors)
        count = self.engine.update_adapter(name, tensors)
        return self._synced(count)

    def update_weights(self, body: bytes) -> dict[str, Any]:
        """``POST /update_weights``: one bucket of the full state dict, names and shapes checked first."""
        tensors, _ = tensors_from_bytes(body)
        _check_shapes("update_weights", tensors, _weight_shapes(self.engine), "the model")
        _check_finite("update_weights", tensors)
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


def _check_finite(route: str, tensors: dict[str, Any]) -> None:
    """Refuse (naming it) a tensor holding NaN or an infinity: synced, it would poison every later rollout."""
    import torch

    for name, tensor in tensors.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise WireError(f"{route}: {name!r} holds NaN or infinite values; the trainer's weights diverged (nothing "
                            "was synced)")  # fmt: skip


def _placeholders(record: dict[str, Any]) -> tuple[list[tuple[int, int, Any]], Any]:
    """The record's media parts that carry no value (``(message, part, the part)``), and its messages with each of
    them replaced by an empty text part."""
    from swiftcore.api.template import media_type

    found, messages = [], record.get("messages")
    if not isinstance(messages, list):
        return found, messages
    out = []
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            content = list(content)
            for j, part in enumerate(content):
                kind = media_type(part) if isinstance(part, dict) and part.get("type") != "text" else None
                if kind is not None and all(part.get(k) is None for k in (kind, f"{kind}_url", f"input_{kind}")):
                    found.append((i, j, part))
                    content[j] = {"type": "text", "text": ""}
            message = {**message, "content": content}
        out.append(message)
    return found, out


#: The keys an inline media item of a record's ``images`` / ``audios`` column may have (a path is checked).
_INLINE_KEYS = frozenset({"data", "format", "array", "sampling_rate", "path"})


def _media_checked(record: dict[str, Any], policy: Any) -> dict[str, Any]:
    """``record`` with every media value held to ``policy`` as ``swiftcore deploy`` holds a chat request's: inline
    ``data:`` values, http(s) URLs only where allowed, local paths only under the media root (checked and resolved
    there, so the engine never opens a file outside it), at most ``policy.max_items`` items.

    Raises:
        InvalidRequestError: a value the policy refuses (the message names the part, never a file of the server's
            beyond what the record named).
    """
    from swiftcore_infer import InvalidRequestError, media_kinds, openai_media_parts

    kinds = media_kinds(record)
    if not kinds:
        return record
    accepted = tuple(sorted({kind for _, kind in kinds}))  # what the model takes is the engine's check, later
    # A part with no value of its own ({"type": "image"}, its item in the "images" column) is checked with the column;
    # deploy's check would refuse it, so it stands aside as an empty text part and comes back as it was.
    placeholders, messages = _placeholders(record)
    out = openai_media_parts({**record, "messages": messages}, accepted, "the policy", policy)
    for i, j, part in placeholders:
        content = list(out["messages"][i]["content"])
        content[j] = part
        out["messages"][i] = {**out["messages"][i], "content": content}
    for column in ("images", "audios", "videos"):
        items = record.get(column)
        if not isinstance(items, list):
            continue
        checked = []
        for k, item in enumerate(items):
            what = f"{column}[{k}]"
            if isinstance(item, str) and item.startswith(("http://", "https://")) and not policy.allow_remote:
                raise InvalidRequestError(f"{what}: remote media is off on this server; send it inline as a base64 "
                                          "data: URL", param="messages")  # fmt: skip
            if isinstance(item, str) and not item.startswith(("http://", "https://", "data:")):
                item = str(policy.local_file(item, what))
            elif isinstance(item, dict) and set(item) <= _INLINE_KEYS and isinstance(item.get("path", ""), str):
                if "path" in item:
                    item = {**item, "path": str(policy.local_file(item["path"], what))}
            elif not isinstance(item, str):  # {"bytes": ...} would be read as a path: JSON carries no bytes
                raise InvalidRequestError(f"{what}: expected a data: URL, a path under the media root, or "
                                          "{'data': base64, 'format': ...}", param="messages")  # fmt: skip
            checked.append(item)
        out[column] = checked
    return out


def _status(exc: BaseException) -> int:
    """The HTTP status of an error a route raised: 4xx for the request's fault (a capability the backend lacks
    included: the request asked for it), 500 for the engine's own."""
    from swiftcore_infer import InvalidRequestError, UnsupportedError

    if isinstance(exc, SyncConflictError):
        return 409
    if isinstance(exc, WireError | InvalidRequestError | UnsupportedError):
        return 400
    return 500


def _openapi_bodies(max_requests: int | None) -> dict[str, dict[str, Any]]:
    """The request bodies of the routes, as OpenAPI (the routes read raw bodies; this is what they take)."""
    sampling = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "max_new_tokens": {"type": "integer", "minimum": 1},
            "temperature": {"type": "number", "minimum": 0},
            "top_p": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
            "top_k": {"type": "integer", "minimum": 0},
            "seed": {"type": ["integer", "null"]},
            "stop": {"type": "array", "items": {"type": "string"}},
            "repetition_penalty": {"type": "number", "exclusiveMinimum": 0},
        },
    }
    item = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "prompt": {"oneOf": [{"type": "array", "items": {"type": "integer", "minimum": 0}}, {"type": "string"}]},
            "record": {"type": "object"},
            "sampling": sampling,
            "adapter": {"type": ["string", "null"]},
        },
    }
    requests: dict[str, Any] = {"type": "array", "items": item}
    if max_requests is not None:
        requests["maxItems"] = max_requests
    rollouts = {
        "type": "object",
        "required": ["requests"],
        "additionalProperties": False,
        "properties": {"requests": requests, "logprobs": {"type": "boolean"}},
    }
    tensors = {"content": {_TENSORS: {"schema": {"type": "string", "format": "binary"}}}, "required": True}
    return {
        "rollouts": {"requestBody": {"content": {_JSON: {"schema": rollouts}}, "required": True}},
        "tensors": {"requestBody": tensors},
        "adapter": {
            "requestBody": tensors,
            "parameters": [{"name": "name", "in": "query", "required": True, "schema": {"type": "string"}}],
        },
    }


def create_app(
    service: RolloutService,
    *,
    max_body_bytes: int,
    api_key: str | None = None,
    allowed_hosts: tuple[str, ...] = (),
) -> Any:
    """The FastAPI app of the routes in the module docstring, over ``service``, behind the shared request guard.

    The OpenAPI schema is not served (``app.openapi()`` builds it in-process, for the fuzz test): the routes are a
    trainer's, not a public API's.

    Args:
        service: the engine and its state.
        max_body_bytes: the largest request body; a larger one gets HTTP 413 (on its ``Content-Length``, or the
            moment a chunked body passes it).
        api_key: the key every route needs (None: none, a loopback server started with ``--no-api-key``).
        allowed_hosts: more ``Host`` names a loopback server answers to (``swiftcore rollout --allowed-host``).
    """
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException
    from swiftcore_infer import error_text
    from swiftcore_serve import RequestGuard

    app = FastAPI(title="swiftcore rollout", docs_url=None, redoc_url=None, openapi_url=None)
    bodies = _openapi_bodies(service.max_requests)
    paths = _server_paths(service.engine)

    def error(status: int, message: str, headers: dict[str, str] | None = None) -> Any:
        message = paths.sub("<server path>", message)  # an engine's message may name a file of the server's
        return JSONResponse({"error": {"message": message, "code": status}}, status_code=status, headers=headers)

    async def http_error(request: Request, exc: HTTPException) -> Any:  # 404, 405, the guard's 413 mid-body
        return error(exc.status_code, str(exc.detail), dict(exc.headers or {}))

    app.add_exception_handler(HTTPException, http_error)

    async def body_of(request: Request, kind: str) -> bytes | Any:
        declared = request.headers.get("content-type", "").partition(";")[0].strip().lower()
        if declared != kind:
            return error(415, f"{request.url.path}: send the body as {kind} (got {declared or 'no type'!r})")
        return await request.body()  # the guard holds it to --max-body-mb while it arrives

    async def answer(route: str, func: Callable[..., Any], *args: Any) -> Any:
        try:
            return JSONResponse(await service.run(func, *args))
        except Exception as exc:
            status = _status(exc)
            if status >= 500:
                log.exception("%s failed", route)
                return error(status, f"{route}: the rollout engine failed on this request; the server's log has the "
                                     "details")  # fmt: skip
            log.warning("%s refused: %s", route, exc)
            return error(status, error_text(exc))

    @app.get("/health")
    async def health() -> Any:
        return await answer("/health", service.health)

    @app.post("/rollouts", openapi_extra=bodies["rollouts"])
    async def rollouts(request: Request) -> Any:
        body = await body_of(request, _JSON)
        if not isinstance(body, bytes):
            return body
        try:
            payload = json.loads(body)
        except ValueError as exc:
            return error(400, f"/rollouts: the body is not JSON ({exc})")
        return await answer("/rollouts", service.rollouts, payload)

    async def adapter_call(request: Request, route: str, func: Callable[..., Any]) -> Any:
        """``func(name, body)`` for a route that takes an adapter's name (``?name=``) and its tensors."""
        body = await body_of(request, _TENSORS)
        if not isinstance(body, bytes):
            return body
        name = request.query_params.get("name", "")
        if not name:
            return error(400, f"{route}: give the adapter's name (?name=policy)")
        return await answer(route, func, name, body)

    @app.post("/load_adapter", openapi_extra=bodies["adapter"])
    async def load_adapter(request: Request) -> Any:
        return await adapter_call(request, "/load_adapter", service.load_adapter)

    @app.post("/update_adapter", openapi_extra=bodies["adapter"])
    async def update_adapter(request: Request) -> Any:
        return await adapter_call(request, "/update_adapter", service.update_adapter)

    @app.post("/update_weights", openapi_extra=bodies["tensors"])
    async def update_weights(request: Request) -> Any:
        body = await body_of(request, _TENSORS)
        if not isinstance(body, bytes):
            return body
        return await answer("/update_weights", service.update_weights, body)

    # Outermost: Host, Origin, key, body type and size come before any route (swiftcore deploy's own guard).
    app.add_middleware(
        RequestGuard,
        api_key=api_key,
        max_body_bytes=max_body_bytes,
        allowed_hosts=allowed_hosts,
        check_origin=True,
        body_types=(_JSON, _TENSORS),
        public_paths=(),
        command="swiftcore rollout",
        key_sources=f"--api-key-file or ${KEY_ENV}",
    )
    return app


def _server_paths(engine: Any) -> Any:
    """A pattern of the server's own paths an error message could name: the model's directory (as given and
    resolved) and the adapters' temporary folders."""
    import re

    found = {re.escape(str(Path(tempfile.gettempdir()) / _ADAPTER_PREFIX)) + r"[\w.-]*"}
    base = getattr(engine, "base_dir", None)
    if base is not None:
        found |= {re.escape(str(base)), re.escape(str(Path(base).resolve()))}
    return re.compile("|".join(sorted(found, key=len, reverse=True)))


def default_max_body_bytes(model_dir: str | Path) -> int:
    """``--max-body-mb``'s default for a checkpoint: its largest tensor in float32 (a tensor larger than a sync
    bucket travels alone; the trainer may hold float32 weights), or a 64 MiB bucket, whichever is larger, plus
    1 MiB for the safetensors header."""
    from swiftcore_recipe_rl.identity import largest_tensor_elements

    return max(largest_tensor_elements(model_dir) * 4, 64 * 2**20) + 2**20


def serve(
    engine: Any,
    *,
    host: str,
    port: int,
    log_level: str = "info",
    max_body_bytes: int | None = None,
    api_key: str | None = None,
    allowed_hosts: tuple[str, ...] = (),
    media: Any = None,
    max_requests: int | None = 256,
) -> None:
    """Serve ``engine`` on ``host:port`` until interrupted (uvicorn, as every swiftcore server listens), then free it.

    Args:
        engine: the rollout engine.
        host: the address to bind.
        port: the TCP port.
        log_level: uvicorn's log level.
        max_body_bytes: the largest request body (None: :func:`default_max_body_bytes` of the served checkpoint).
        api_key: the key every route needs (None: none; the command allows that on a loopback address only).
        allowed_hosts: more ``Host`` names a loopback server answers to.
        media: the :class:`~swiftcore_infer.MediaPolicy` of rollouts' media (None: deploy's default, no local files).
        max_requests: the most requests one ``/rollouts`` call may carry.
    """
    from swiftcore_infer import MediaPolicy
    from swiftcore_serve import run_uvicorn

    from swiftcore_recipe_rl.identity import checkpoint_identity

    limit = max_body_bytes if max_body_bytes is not None else default_max_body_bytes(engine.base_dir)
    service = RolloutService(
        engine,
        identity=checkpoint_identity(engine.base_dir),
        media=media if media is not None else MediaPolicy(),
        max_requests=max_requests,
    )
    app = create_app(service, max_body_bytes=limit, api_key=api_key, allowed_hosts=allowed_hosts)
    try:
        run_uvicorn(app, host=host, port=port, log_level=log_level)
    finally:
        service.close()
