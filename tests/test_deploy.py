"""``swiftcore deploy``'s OpenAI-compatible API, driven by the real ``openai`` client (transformers backend).

The server runs in-process on a loopback port (one per module); the engine is the real transformers engine
on a tiny Qwen3 with a LoRA adapter trained by ``swiftcore train``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

openai = pytest.importorskip("openai")

API_KEY = "test-key"
MODEL = "tiny"
USER = [{"role": "user", "content": "Is 12 even or odd?"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from swiftcore_infer import TransformersEngine
    from swiftcore_testing import make_tiny_qwen3, plugins_with_tiny_qwen3, train_tiny_lora

    plugins = plugins_with_tiny_qwen3()
    work = tmp_path_factory.mktemp("deploy")
    model_dir = make_tiny_qwen3(work / "tiny")
    lora = train_tiny_lora(model_dir, work / "lora", plugins)
    return TransformersEngine(model_dir, plugins), lora


@pytest.fixture(scope="module")
def app(setup: Any) -> Any:
    from swiftcore_serve import ServerConfig, build_app

    engine, lora = setup
    return build_app(engine, ServerConfig(model_name=MODEL, adapters={"parity": str(lora)}, api_key=API_KEY))


@pytest.fixture(scope="module")
def server(app: Any) -> Iterator[str]:
    from swiftcore_testing import ServerThread

    with ServerThread(app) as base_url:
        yield base_url


@pytest.fixture
def on_worker(app: Any, server: str) -> Callable[[Callable[[], Any]], Any]:
    """``on_worker(fn)``: ``fn()`` run on the server's engine thread, its value returned.

    The engine is not thread-safe; in the server one thread, the worker's, touches it. A reply arrives as soon as
    its last token is out, while the worker may still be closing that request's generation (leaving the base
    model's ``disable_adapter`` context); a direct engine call from the test's own thread could overlap that and
    generate with the adapter half switched on (seen once in a full run: a garbled reply). Queued on the worker,
    the reference call runs only after the served one is wholly done, as the server's own calls do.
    """
    import asyncio

    return lambda fn: asyncio.run(app.state.worker.call(fn))


@pytest.fixture
def engine(setup: Any) -> Any:
    return setup[0]


@pytest.fixture
def client(server: str) -> Any:
    return openai.OpenAI(base_url=f"{server}/v1", api_key=API_KEY, max_retries=0, timeout=60)


def _still_serving(client: Any) -> None:
    reply = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=2, temperature=0)
    assert reply.choices[0].finish_reason in ("length", "stop")


def test_models_lists_base_and_adapters(client: Any) -> None:
    assert [m.id for m in client.models.list().data] == [MODEL, "parity"]


def test_chat_matches_the_engine(client: Any, engine: Any, on_worker: Any) -> None:
    reply = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=8, temperature=0)
    expected = on_worker(lambda: engine.generate([{"messages": USER}], max_new_tokens=8)[0])
    assert reply.choices[0].message.content == expected.content
    assert reply.choices[0].message.role == "assistant"
    assert reply.usage.prompt_tokens == expected.prompt_tokens
    assert reply.usage.completion_tokens == expected.completion_tokens
    assert reply.choices[0].finish_reason == expected.finish_reason


def test_adapter_is_selected_by_model_name(client: Any, engine: Any, on_worker: Any) -> None:
    tuned = client.chat.completions.create(model="parity", messages=USER, max_tokens=8, temperature=0)
    base = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=8, temperature=0)
    expected = on_worker(lambda: engine.generate([{"messages": USER}], max_new_tokens=8, adapter="parity")[0])
    assert tuned.choices[0].message.content == expected.content
    assert tuned.choices[0].message.content != base.choices[0].message.content


def test_streaming_equals_non_streaming(client: Any) -> None:
    full = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=10, temperature=0)
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=USER,
            max_tokens=10,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [full.choices[0].finish_reason]
    assert chunks[-1].usage.completion_tokens == full.usage.completion_tokens


def test_chat_template_kwargs_reach_the_template(client: Any) -> None:
    # qwen3 with enable_thinking=False adds an empty thinking block to the generation prompt.
    on = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=1, temperature=0)
    off = client.chat.completions.create(
        model=MODEL,
        messages=USER,
        max_tokens=1,
        temperature=0,
        extra_body={"chat_template_kwargs": {"enable_thinking": False}},
    )
    assert off.usage.prompt_tokens > on.usage.prompt_tokens


class _Scripted:
    """Replaces the engine's forward pass with canned replies; template, parsing and HTTP stay real."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.prompts: list[str] = []

    def generate_ids(self, prompts: list, params: list, adapters: list) -> list:
        out = []
        for ids in prompts:
            text = self.engine.tokenizer.decode(ids)
            self.prompts.append(text)
            if "<tool_response>" in text:
                reply = "It is sunny in Paris."
            else:
                reply = (
                    'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
                )
            ids = self.engine.tokenizer(reply, add_special_tokens=False)["input_ids"]
            out.append(ids + self.engine.stop_token_ids[:1])
        return out

    def stream_many_ids(self, prompts: list, params: list, adapters: list) -> Iterator[tuple[int, list]]:
        for row, tokens in enumerate(self.generate_ids(prompts, params, adapters)):
            for token in tokens:
                yield row, [token]


def test_tool_call_round_trip(client: Any, engine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    scripted = _Scripted(engine)
    monkeypatch.setattr(engine, "_generate_ids", scripted.generate_ids)
    monkeypatch.setattr(engine, "_stream_many_ids", scripted.stream_many_ids)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Paris?"}]

    first = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS, temperature=0)
    assert "get_weather" in scripted.prompts[-1] and "<tools>" in scripted.prompts[-1]  # tools were rendered
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Let me check."
    call = choice.message.tool_calls[0]
    assert call.id and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}

    messages.append(choice.message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps({"sky": "sunny"})})
    second = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS, temperature=0)
    sent = scripted.prompts[-1]
    assert '"city": "Paris"' in sent and '{"sky": "sunny"}' in sent  # the call and its result went back in
    assert second.choices[0].message.content == "It is sunny in Paris."
    assert second.choices[0].finish_reason == "stop"

    # Streamed: content first, then the parsed tool call, never the raw <tool_call> text.
    chunks = list(client.chat.completions.create(model=MODEL, messages=messages[:1], tools=TOOLS, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == "Let me check." and "<tool_call>" not in text
    calls = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
    assert [tc.function.name for tc in calls] == ["get_weather"]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_embeddings(client: Any, engine: Any, on_worker: Any) -> None:
    texts = ["hello world", "something else"]
    got = client.embeddings.create(model=MODEL, input=texts)  # the client asks for base64 and decodes it
    expected = on_worker(lambda: engine.embed(texts))
    assert [d.index for d in got.data] == [0, 1]
    for item, vector in zip(got.data, expected, strict=True):
        assert item.embedding == pytest.approx(vector, abs=1e-6)
    floats = client.embeddings.create(model=MODEL, input="hello world", encoding_format="float")
    assert floats.data[0].embedding == pytest.approx(expected[0], abs=1e-6)
    assert got.usage.prompt_tokens > 0


def test_completions(client: Any, engine: Any, on_worker: Any) -> None:
    from swiftcore_infer import Request, SamplingParams

    reply = client.completions.create(model=MODEL, prompt="The number twelve is", max_tokens=6, temperature=0)
    request = Request(prompt="The number twelve is", sampling=SamplingParams(max_new_tokens=6))
    expected = on_worker(lambda: engine.generate_requests([request])[0])
    assert reply.choices[0].text == expected.text
    streamed = client.completions.create(
        model=MODEL, prompt="The number twelve is", max_tokens=6, temperature=0, stream=True
    )
    assert "".join(c.choices[0].text for c in streamed) == expected.text


def test_wrong_api_key_is_401(server: str, client: Any) -> None:
    bad = openai.OpenAI(base_url=f"{server}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as info:
        bad.models.list()
    assert info.value.status_code == 401 and "API key" in str(info.value)
    assert httpx.get(f"{server}/v1/models").status_code == 401  # no key at all
    assert httpx.get(f"{server}/health").json()["status"] == "ok"  # health needs none
    _still_serving(client)


def test_malformed_json_is_400(server: str, client: Any) -> None:
    response = httpx.post(
        f"{server}/v1/chat/completions",
        content=b'{"model": "tiny", "messages": [',
        headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"},
    )
    assert response.status_code == 400
    assert "JSON" in response.json()["error"]["message"]
    _still_serving(client)


def test_unknown_model_is_404(client: Any) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="nope", messages=USER)
    assert "nope" in str(info.value) and "available" in str(info.value)
    _still_serving(client)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"max_tokens": -5}, "max_tokens"),
        ({"temperature": -1}, "temperature"),
        ({"messages": []}, "messages"),
        ({"messages": [{"content": "no role"}]}, "role"),
        ({"n": 3}, "n=3"),
        ({"max_tokens": 5000}, "context"),
    ],
)
def test_invalid_requests_are_400_with_a_message(client: Any, kwargs: dict, needle: str) -> None:
    body = {"model": MODEL, "messages": USER, **kwargs}
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(**body)
    assert needle in str(info.value)
    with pytest.raises(openai.BadRequestError):  # streaming requests are refused before the stream starts
        client.chat.completions.create(**body, stream=True)
    _still_serving(client)


def test_full_queue_is_429(setup: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from swiftcore_serve import ServerConfig, build_app
    from swiftcore_testing import ServerThread

    engine = setup[0]
    entered, release = threading.Event(), threading.Event()
    real = engine._generate_ids

    def blocking(*args: Any) -> Any:
        entered.set()
        release.wait(30)
        return real(*args)

    real_stream = engine._stream_many_ids

    def blocking_stream(*args: Any) -> Any:  # the server generates through the (cancellable) stream path
        entered.set()
        release.wait(30)
        yield from real_stream(*args)

    monkeypatch.setattr(engine, "_generate_ids", blocking)
    monkeypatch.setattr(engine, "_stream_many_ids", blocking_stream)
    with ServerThread(build_app(engine, ServerConfig(model_name=MODEL, max_queue=1))) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=60)
        results: list[Any] = []

        def ask() -> None:
            results.append(client.chat.completions.create(model=MODEL, messages=USER, max_tokens=2))

        running = threading.Thread(target=ask)
        running.start()
        assert entered.wait(30)  # the worker is busy with the first request
        waiting = threading.Thread(target=ask)
        waiting.start()
        for _ in range(1000):  # wait until the second request sits in the queue
            if _queue_size(url) == 1:
                break
            time.sleep(0.01)
        with pytest.raises(openai.RateLimitError) as info:
            client.chat.completions.create(model=MODEL, messages=USER, max_tokens=2)
        assert "queue is full" in str(info.value)
        release.set()
        running.join(30)
        waiting.join(30)
        assert len(results) == 2


def _queue_size(url: str) -> int:
    return int(httpx.get(f"{url}/health").json().get("queued", -1))


def test_cli_help_lists_the_options() -> None:
    from click.testing import CliRunner

    from swiftcore.cli.main import cli

    result = CliRunner().invoke(cli, ["deploy", "--help"])
    assert result.exit_code == 0
    for option in ("--api-key", "--lora", "--host", "--max-queue", "--backend"):
        assert option in result.output
    assert "127.0.0.1" in result.output


def test_bad_lora_argument_is_a_clear_error(tmp_path: Path) -> None:
    from swiftcore.cli.main import main

    assert main(["deploy", "--model", str(tmp_path), "--lora", "noequals"]) == 2


def test_32_concurrent_requests_with_3_invalid(server: str) -> None:
    from concurrent.futures import ThreadPoolExecutor

    bodies: list[dict[str, Any]] = [
        {"model": MODEL, "messages": [{"role": "user", "content": f"question {i}"}], "max_tokens": 4, "temperature": 0}
        for i in range(32)
    ]
    bodies[4]["messages"] = [{"role": "user"}]  # no content
    bodies[11]["max_tokens"] = 0
    bodies[29]["messages"] = [{"role": "user", "content": "x " * 2000}]  # longer than the context
    headers = {"Authorization": f"Bearer {API_KEY}"}
    with ThreadPoolExecutor(32) as pool:
        responses = list(
            pool.map(
                lambda b: httpx.post(f"{server}/v1/chat/completions", json=b, headers=headers, timeout=120), bodies
            )
        )
    statuses = [r.status_code for r in responses]
    assert [i for i, s in enumerate(statuses) if s != 200] == [4, 11, 29]
    assert all(statuses[i] == 400 and responses[i].json()["error"]["message"] for i in (4, 11, 29))
    assert (
        sum(r.json()["choices"][0]["finish_reason"] in ("stop", "length") for r in responses if r.status_code == 200)
        == 29
    )
