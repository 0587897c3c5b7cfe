"""``swiftcore deploy`` refuses OpenAI fields it does not implement (a 400 naming the field) instead of ignoring
them: a client asking for JSON output, ``best_of`` or a ``suffix`` must not take a reply that lacks them for one
that honours them (log probabilities are served: ``plugins/serve/tests/test_deploy_logprobs.py``).
The values that ask for nothing (``logprobs: false``, ``best_of: 1``, ``response_format: {"type": "text"}``) are
served."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

MODEL = "tiny"
USER = [{"role": "user", "content": "Is 12 even or odd?"}]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from fastapi.testclient import TestClient
    from swiftcore_infer import TransformersEngine
    from swiftcore_serve import ServerConfig, build_app
    from swiftcore_testing import make_tiny_qwen3, plugins_with_tiny_qwen3

    engine = TransformersEngine(make_tiny_qwen3(tmp_path_factory.mktemp("unsupported") / "tiny"),
                                plugins_with_tiny_qwen3())  # fmt: skip
    with TestClient(build_app(engine, ServerConfig(model_name=MODEL, default_max_tokens=2))) as test_client:
        yield test_client


def _chat(client: Any, **fields: Any) -> Any:
    return client.post("/v1/chat/completions", json={"model": MODEL, "messages": USER, **fields})


def _completion(client: Any, **fields: Any) -> Any:
    return client.post("/v1/completions", json={"model": MODEL, "prompt": "Twelve is", **fields})


@pytest.mark.parametrize(
    ("send", "field", "value", "expected"),
    [
        (_chat, "response_format", {"type": "json_object"}, "does not constrain the output to JSON"),
        (_chat, "response_format", {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}},
         "does not constrain the output to JSON"),
        (_completion, "best_of", 3, "one completion per prompt"),
        (_completion, "best_of", True, "one completion per prompt"),
        (_completion, "suffix", "done.", "does not fill in the middle"),
    ],
    ids=["chat-json_object", "chat-json_schema", "completion-best_of", "completion-best_of-true", "completion-suffix"],
)  # fmt: skip
def test_an_unimplemented_field_is_a_400_naming_it(client: Any, send: Any, field: str, value: Any, expected) -> None:
    for stream in (False, True):
        reply = send(client, **{field: value}, stream=stream)
        assert reply.status_code == 400, reply.text
        error = reply.json()["error"]
        assert error["param"] == field
        assert error["message"].startswith(f"{field}={value!r} is not supported: ") and expected in error["message"]


@pytest.mark.parametrize(
    ("send", "fields"),
    [
        (_chat, {"logprobs": False, "top_logprobs": None, "response_format": {"type": "text"}}),
        (_chat, {"logprobs": None, "response_format": None}),
        (_completion, {"logprobs": None, "best_of": 1, "suffix": None}),
        (_completion, {"best_of": 1.0}),
    ],
    ids=["chat", "chat-nulls", "completion", "completion-best_of-1.0"],
)
def test_the_values_that_ask_for_nothing_are_served(client: Any, send: Any, fields: dict[str, Any]) -> None:
    reply = send(client, **fields)
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["logprobs"] is None
