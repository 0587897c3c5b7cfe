"""What travels between a trainer and ``swiftcore rollout``: tensors as safetensors bytes, rollout requests and
their results as JSON. One module for both ends, so the client (:mod:`~swiftcore_recipe_rl.remote`) and the
server (:mod:`~swiftcore_recipe_rl.rollout_server`) cannot disagree on a field.

Tensors travel as a safetensors file in the request body, never as JSON lists: exact (bfloat16 included), about
the size of the tensors themselves, and safe to load (no pickle).

Importing this module imports neither torch nor safetensors.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "ADAPTER_CONFIG_KEY",
    "SAMPLING_FIELDS",
    "WireError",
    "generation_from_json",
    "generation_to_json",
    "request_from_json",
    "request_to_json",
    "tensors_from_bytes",
    "tensors_to_bytes",
]

#: The safetensors metadata key that carries a LoRA adapter's ``adapter_config.json`` (``POST /load_adapter``).
ADAPTER_CONFIG_KEY = "adapter_config"
#: The :class:`~swiftcore_infer.types.SamplingParams` fields a rollout request may set.
SAMPLING_FIELDS = ("max_new_tokens", "temperature", "top_p", "top_k", "seed", "stop", "repetition_penalty")
#: The :class:`~swiftcore_infer.types.Generation` fields a rollout result carries.
_GENERATION_FIELDS = (
    "text", "content", "reasoning_content", "tool_calls", "prompt_tokens", "completion_tokens", "finish_reason",
    "token_ids", "logprobs",
)  # fmt: skip


class WireError(ValueError):
    """A body or field that is not what the protocol says; the server answers it with HTTP 400."""


def tensors_to_bytes(
    named: Mapping[str, Any] | Iterable[tuple[str, Any]], metadata: dict[str, str] | None = None
) -> bytes:
    """``name -> tensor`` (or ``(name, tensor)`` pairs) as the bytes of one safetensors file.

    Each tensor is copied to the CPU, contiguous and unshared: safetensors refuses tensors that share memory (a
    view of another), and a state dict can hold such views.
    """
    from safetensors.torch import save

    pairs = named.items() if isinstance(named, Mapping) else named
    return save({name: t.detach().to("cpu").contiguous().clone() for name, t in pairs}, metadata=metadata)


def tensors_from_bytes(body: bytes) -> tuple[dict[str, Any], dict[str, str]]:
    """The tensors and the metadata of a safetensors file's bytes.

    Raises:
        WireError: the body is empty or not a safetensors file.
    """
    if not body:
        raise WireError("the body is empty; send the tensors as a safetensors file (safetensors.torch.save)")
    import json

    from safetensors.torch import load

    try:
        tensors = load(body)
    except Exception as exc:  # safetensors raises its own SafetensorError (and others) on a malformed file
        raise WireError(f"the body is not a safetensors file ({exc})") from exc
    metadata: dict[str, str] = {}
    if len(body) >= 8:  # the header's own metadata; load() drops it
        size = int.from_bytes(body[:8], "little")
        try:
            metadata = dict(json.loads(body[8 : 8 + size]).get("__metadata__") or {})
        except ValueError:
            metadata = {}
    return tensors, metadata


def request_to_json(request: Any) -> dict[str, Any]:
    """A :class:`~swiftcore_infer.types.Request` as the JSON of one ``POST /rollouts`` item."""
    sampling = {name: getattr(request.sampling, name) for name in SAMPLING_FIELDS}
    sampling["stop"] = list(sampling["stop"])
    out: dict[str, Any] = {"sampling": sampling, "adapter": request.adapter}
    if request.record is not None:
        out["record"] = request.record
    else:
        out["prompt"] = request.prompt
    return out


def request_from_json(item: Any, where: str) -> Any:
    """One ``POST /rollouts`` item as a :class:`~swiftcore_infer.types.Request`.

    Raises:
        WireError: a field of the wrong type or an unknown one, both or neither of ``record`` and ``prompt``, or a
            sampling value out of range (the message starts with ``where``).
    """
    from swiftcore_infer import InvalidRequestError, Request, SamplingParams

    if not isinstance(item, dict):
        raise WireError(f"{where}: expected an object with 'prompt' (token ids) or 'record', got {type(item).__name__}")
    unknown = sorted(set(item) - {"record", "prompt", "sampling", "adapter"})
    if unknown:
        raise WireError(f"{where}: unknown field(s) {', '.join(map(repr, unknown))}")
    record, prompt = item.get("record"), item.get("prompt")
    if record is not None and not isinstance(record, dict):
        raise WireError(f"{where}.record: expected an object with 'messages'")
    if prompt is not None and not (
        isinstance(prompt, str) or (isinstance(prompt, list) and all(type(t) is int for t in prompt))
    ):
        raise WireError(f"{where}.prompt: expected a list of token ids (integers) or a string")
    adapter = item.get("adapter")
    if adapter is not None and not isinstance(adapter, str):
        raise WireError(f"{where}.adapter: expected an adapter name or null")
    sampling = item.get("sampling") or {}
    if not isinstance(sampling, dict):
        raise WireError(f"{where}.sampling: expected an object")
    odd = sorted(set(sampling) - set(SAMPLING_FIELDS))
    if odd:
        raise WireError(
            f"{where}.sampling: unknown field(s) {', '.join(map(repr, odd))}; known: {', '.join(SAMPLING_FIELDS)}"
        )
    values = dict(sampling)
    if isinstance(values.get("stop"), list):
        values["stop"] = tuple(values["stop"])
    try:
        return Request(record=record, prompt=prompt, sampling=SamplingParams(**values), adapter=adapter)
    except InvalidRequestError as exc:
        raise WireError(f"{where}: {exc}") from exc


def generation_to_json(generation: Any, prompt_ids: list[int], completion_ids: list[int]) -> dict[str, Any]:
    """One rollout's result: the prompt ids the engine encoded, the completion ids (the stop token kept) and the
    parsed reply."""
    out = {name: getattr(generation, name) for name in _GENERATION_FIELDS}
    return {"prompt_ids": [int(t) for t in prompt_ids], "completion_ids": [int(t) for t in completion_ids], **out}


def generation_from_json(item: dict[str, Any]) -> tuple[Any, list[int], list[int]]:
    """``(Generation, prompt ids, completion ids)`` of one rollout result."""
    from swiftcore_infer import Generation

    generation = Generation(**{name: item.get(name) for name in _GENERATION_FIELDS if name in item})
    return generation, list(item["prompt_ids"]), list(item["completion_ids"])
