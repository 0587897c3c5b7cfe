"""The trainer's side of server mode (``--rollout-server URL``): a rollout engine that is a ``swiftcore rollout``
server, over HTTP.

:class:`RemoteRolloutEngine` has what :class:`~swiftcore_recipe_rl.sync.WeightSync` and the trainer's rollout mixin
use of an engine (``generate_rollouts``, ``load_adapter``, ``update_adapter``, ``update_weights``, ``adapters``,
``capabilities``, ``stop_token_ids``, ``pad_token_id``, ``close``), so colocate and server mode share every line
above it. :func:`connect_rollout_server` checks at start that the server serves the trainer's base checkpoint and
template.

Adapters are served under a name that carries a digest of their ``adapter_config.json`` (``policy-1a2b3c4d5e``): a
trainer that reconnects with the same adapter settings (a resumed run) updates the adapter it loaded before, and a
later run with another rank or other targets gets an adapter of its own next to it instead of a refusal.

A server that stops answering (it died, or took longer than ``--rollout-server-timeout``) ends the run with one
:class:`~swiftcore.api.SwiftcoreError` naming the URL and the way back: the step it happened in takes no optimiser
step, the checkpoints already written stay as they are, and ``--resume-from-checkpoint latest`` continues from the
last one once the server is back.

Importing this module imports neither torch nor httpx.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["RemoteRolloutEngine", "connect_rollout_server"]

#: What a ``swiftcore rollout`` server's ``GET /health`` always has.
_HEALTH_KEYS = ("weight_version", "backend", "capabilities", "stop_token_ids", "pad_token_id", "max_model_len")


class RemoteRolloutEngine:
    """A ``swiftcore rollout`` server as a rollout engine.

    Args:
        url: the server's base URL (``http://127.0.0.1:8001``).
        timeout: seconds a call may wait for the server's answer (a rollout round included).
        api_key: the server's key (``--rollout-server-key-file``), sent as ``Authorization: Bearer`` with every call;
            None for a server started with ``--no-api-key``.

    Attributes:
        url: the base URL, without a trailing slash.
        info: the server's last ``GET /health`` answer.
        weight_version: the server's weight version after this client's last call.
        adapters: the adapters this client loaded on the server (name -> URL), as an engine's ``adapters``.
        served_names: this client's adapter names -> the names the server serves them under (name + config digest).
        backend, capabilities, stop_token_ids, pad_token_id, max_model_len: the server engine's.
    """

    #: The option that chose this engine, as errors name it.
    flag = "--rollout-server"

    def __init__(self, url: str, *, timeout: float = 600.0, api_key: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._api_key = api_key
        self._open()
        self.adapters: dict[str, str] = {}
        self.served_names: dict[str, str] = {}
        self.info = self.health()
        missing = [key for key in _HEALTH_KEYS if key not in self.info]
        if missing:
            from swiftcore.api import SwiftcoreError

            self.close()
            raise SwiftcoreError(f"{self.url}/health answered without {', '.join(missing)}: is it a `swiftcore "
                                 "rollout` server?")  # fmt: skip
        self.weight_version = int(self.info["weight_version"])
        self.backend = f"{self.info['backend']} at {self.url}"
        self.capabilities = frozenset(self.info["capabilities"])
        self.stop_token_ids = list(self.info["stop_token_ids"])
        self.pad_token_id = self.info["pad_token_id"]
        self.max_model_len = self.info["max_model_len"]
        #: The most requests the server takes in one /rollouts call (a round is split into calls of this size).
        self.max_requests_per_call = self.info.get("max_requests_per_call") or None

    # ------------------------------------------------------------------ transport (HTTP; a Ray actor in ray_actors)

    def _open(self) -> None:
        """Open the connection (an HTTP client)."""
        import httpx

        quiet = logging.getLogger("httpx")
        if quiet.level == logging.NOTSET:  # httpx logs every request at INFO: a line per sync bucket and rollout round
            quiet.setLevel(logging.WARNING)
        timeout = self.timeout
        headers = {"authorization": f"Bearer {self._api_key}"} if self._api_key else None
        self._client = httpx.Client(
            base_url=self.url, timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)), headers=headers
        )

    def _send(self, method: str, route: str, **kwargs: Any) -> tuple[int, Any, str]:
        """One request: ``(status, JSON answer or None, the answer's text)``.

        Raises:
            SwiftcoreError: no answer (unreachable, died, timed out).
        """
        import httpx

        from swiftcore.api import SwiftcoreError

        try:
            response = self._client.request(method, route, **kwargs)
        except httpx.TimeoutException as exc:
            raise SwiftcoreError(self._lost(route, f"no answer within --rollout-server-timeout {self.timeout:g} s "
                                                   f"({type(exc).__name__})")) from exc  # fmt: skip
        except httpx.TransportError as exc:
            raise SwiftcoreError(self._lost(route, f"{type(exc).__name__}: {exc}")) from exc
        try:
            payload = response.json()
        except ValueError:
            payload = None
        return response.status_code, payload, response.text[:500] or response.reason_phrase

    def _call(self, method: str, route: str, **kwargs: Any) -> dict[str, Any]:
        """One call to the server; its JSON answer.

        Raises:
            SwiftcoreError: the server did not answer (unreachable, died, timed out), or refused the call (its
                message quoted).
        """
        from swiftcore.api import SwiftcoreError

        status, payload, text = self._send(method, route, **kwargs)
        if status >= 400:
            message = (payload.get("error") or {}).get("message") if isinstance(payload, dict) else None
            raise SwiftcoreError(f"rollout server {self.url}: {route} answered HTTP {status}: {message or text}")
        if not isinstance(payload, dict):
            raise SwiftcoreError(f"rollout server {self.url}: {route} answered something other than a JSON object")
        if "weight_version" in payload:
            self.weight_version = int(payload["weight_version"])
        return payload

    def _lost(self, route: str, reason: str) -> str:
        return (
            f"rollout server {self.url} stopped answering during {route} ({reason}); this step took no optimiser "
            "step and the checkpoints written so far are intact: restart `swiftcore rollout` on that address, then "
            "run the same command with --resume-from-checkpoint latest"
        )

    def _post_tensors(self, route: str, body: bytes, **params: str) -> dict[str, Any]:
        headers = {"content-type": "application/octet-stream"}
        return self._call("POST", route, content=body, headers=headers, params=params or None)

    # ------------------------------------------------------------------ the engine's methods

    def health(self) -> dict[str, Any]:
        """The server's ``GET /health`` (also kept in :attr:`info`)."""
        self.info = self._call("GET", "/health")
        return self.info

    def generate_rollouts(self, requests: Sequence[Any], *, logprobs: bool = False) -> list[tuple[Any, list[int]]]:
        """``(Generation, completion ids)`` per request, generated by the server in one batch; each request's
        ``encoded`` is set to the prompt ids the server encoded, as a colocated engine sets it. ``logprobs``: each
        generation also carries its sampled tokens' log-probs (``Engine.generate_rollouts``)."""
        from swiftcore_recipe_rl.inline_media import has_media
        from swiftcore_recipe_rl.wire import generation_from_json, request_to_json

        if not requests:
            return []
        items = [request_to_json(r) for r in requests]
        for item in items:
            item["adapter"] = self.served_names.get(item["adapter"], item["adapter"])
            if has_media(item.get("record")):
                item["record"] = _inlined(item["record"], self.flag)
        size = self.max_requests_per_call or len(items)
        rollouts: list[Any] = []
        for start in range(0, len(items), size):  # the server caps requests per call; a round is one or more calls
            body: dict[str, Any] = {"requests": items[start : start + size]}
            if logprobs:
                body["logprobs"] = True
            payload = self._call("POST", "/rollouts", json=body)
            rollouts += payload.get("rollouts") or []
        if len(rollouts) != len(requests):
            from swiftcore.api import SwiftcoreError

            raise SwiftcoreError(f"rollout server {self.url}: /rollouts answered {len(rollouts)} rollouts for "
                                 f"{len(requests)} requests")  # fmt: skip
        out = []
        for request, item in zip(requests, rollouts, strict=True):
            generation, prompt_ids, completion_ids = generation_from_json(item)
            request.encoded = prompt_ids
            out.append((generation, completion_ids))
        return out

    def load_adapter(self, name: str, path: str | Path) -> None:
        """Send the peft adapter saved in ``path`` (``adapter_config.json``, ``adapter_model.safetensors``) to be
        served as ``name`` (on the server: ``name`` and a digest of the config, see the module docstring)."""
        import hashlib
        import json

        from safetensors.torch import load_file

        from swiftcore_recipe_rl.wire import ADAPTER_CONFIG_KEY, tensors_to_bytes

        path = Path(path)
        config = (path / "adapter_config.json").read_text(encoding="utf-8")
        canonical = json.dumps(json.loads(config), sort_keys=True)
        served = f"{name}-{hashlib.sha256(canonical.encode()).hexdigest()[:10]}"
        tensors = load_file(str(path / "adapter_model.safetensors"))
        body = tensors_to_bytes(tensors, metadata={ADAPTER_CONFIG_KEY: config})
        self._post_tensors("/load_adapter", body, name=served)
        self.adapters[name] = self.url
        self.served_names[name] = served

    def update_adapter(self, name: str, tensors: Mapping[str, Any]) -> int:
        """LoRA-only sync: adapter ``name``'s tensors (peft state-dict names); returns how many moved."""
        from swiftcore_recipe_rl.wire import tensors_to_bytes

        served = self.served_names.get(name, name)
        return int(self._post_tensors("/update_adapter", tensors_to_bytes(tensors), name=served)["tensors"])

    def update_weights(self, weights: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> int:
        """Full sync of one bucket (the model's parameter names -> tensors); returns how many moved."""
        from swiftcore_recipe_rl.wire import tensors_to_bytes

        return int(self._post_tensors("/update_weights", tensors_to_bytes(weights))["tensors"])

    def close(self) -> None:
        """Close the HTTP connection (the server and its engine keep running)."""
        client = getattr(self, "_client", None)
        if client is not None:
            client.close()


def _inlined(record: dict[str, Any], flag: str) -> dict[str, Any]:
    """A rollout record with its images and clips inlined (``data:`` URLs, base64 audio), read here: the server
    cannot read the trainer's files, and the prompt it encodes must be the trainer's, image tokens included (checked
    by the trainer against the ids it trains on). ``flag`` names the option in errors."""
    from swiftcore_recipe_rl.inline_media import MEDIA_COLUMNS, inline_media

    rest = {k: v for k, v in record.items() if k not in MEDIA_COLUMNS.values()}
    return {**rest, **inline_media(record, flag, "the rollout engine", "drop the row's video parts")}


def connect_rollout_server(
    url: str, model_dir: str | Path, *, template: str, lora: bool, timeout: float, api_key: str | None = None
) -> RemoteRolloutEngine:
    """The server at ``url``, checked to serve the trainer's base checkpoint with its template.

    Args:
        url: ``--rollout-server``.
        model_dir: the trainer's ``--model``.
        template: the trainer's template name.
        lora: whether the policy is a LoRA adapter (it needs the checkpoint's own base weights on the server).
        timeout: ``--rollout-server-timeout``.
        api_key: the server's key (``--rollout-server-key-file`` or ``$SWIFTCORE_ROLLOUT_KEY``).

    Raises:
        SwiftcoreError: the server does not answer, serves another checkpoint or template, cannot receive weights,
            or (for a LoRA policy) holds base weights a full sync replaced.
    """
    from swiftcore.api import SwiftcoreError
    from swiftcore.api.models import resolve_checkpoint
    from swiftcore_recipe_rl.identity import checkpoint_identity

    try:
        engine = RemoteRolloutEngine(url, timeout=timeout, api_key=api_key)
    except SwiftcoreError as exc:
        if "answered HTTP 401" in str(exc):
            raise SwiftcoreError(
                f"--rollout-server {url}: the server wants its key; give this run the file the server was started "
                "with (--rollout-server-key-file FILE, or $SWIFTCORE_ROLLOUT_KEY)"
            ) from exc
        raise SwiftcoreError(
            f"--rollout-server {url}: no rollout server answers there ({exc.__cause__ or exc}); start one with "
            f"`swiftcore rollout --model {model_dir} --port PORT` and pass its URL"
        ) from exc
    info = engine.info
    base, _ = resolve_checkpoint(model_dir, None)
    mine = checkpoint_identity(base)
    served = info.get("model") or {}
    problems = []
    if served.get("fingerprint") != mine["fingerprint"]:
        problems.append(
            f"it serves {served.get('name')!r} ({served.get('model_type')}, {served.get('num_parameters')} "
            f"parameters), not this run's base checkpoint {str(base)!r} ({mine['model_type']}, "
            f"{mine['num_parameters']} parameters): restart it with `swiftcore rollout --model {base}`"
        )
    if info.get("template") != template:
        problems.append(f"it encodes prompts with template {info.get('template')!r}, this run with {template!r}: "
                        f"restart it with --template {template}")  # fmt: skip
    if "update_weights" not in engine.capabilities:
        problems.append(f"its backend {info.get('backend')!r} cannot receive the trainer's weights")
    if lora and info.get("base_weights") != "checkpoint":
        problems.append(
            f"a full sync replaced its base weights (weight version {info.get('weight_version')}) and this run "
            "trains a LoRA adapter on the checkpoint's own: restart `swiftcore rollout`"
        )
    if problems:
        engine.close()
        raise SwiftcoreError(f"--rollout-server {url}: " + "; ".join(problems))
    return engine
