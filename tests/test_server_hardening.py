"""``swiftcore deploy`` under hostile input: body and prompt limits, disconnects, a full queue, error shapes,
auth on every route, model names without paths, and the Host-header (DNS-rebinding) check.

Real uvicorn servers on loopback ports (one per configuration, started once per module) over the real
transformers engine on a tiny random Qwen3; requests go out through httpx, the ``openai`` client or, where
the test needs to control every byte (an oversized or chunked body), a raw socket.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

openai = pytest.importorskip("openai")

KEY = "hardening-key"
MODEL = "tiny"
AUTH = {"Authorization": f"Bearer {KEY}"}
USER = [{"role": "user", "content": "Is 12 even or odd?"}]
MIB = 2**20


# ---------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from swiftcore_infer import TransformersEngine
    from swiftcore_testing import make_tiny_qwen3, plugins_with_tiny_qwen3

    model_dir = make_tiny_qwen3(tmp_path_factory.mktemp("hardening") / "tiny")
    return TransformersEngine(model_dir, plugins_with_tiny_qwen3())


def _serve(engine: Any, **config: Any) -> Any:
    from swiftcore_serve import ServerConfig, build_app
    from swiftcore_testing import ServerThread

    return ServerThread(build_app(engine, ServerConfig(model_name=MODEL, **config)))


@pytest.fixture(scope="module")
def server(engine: Any) -> Iterator[str]:
    """The default configuration (32 MiB body limit, docs off) with an API key."""
    with _serve(engine, api_key=KEY) as url:
        yield url


@pytest.fixture(scope="module")
def small_server(engine: Any) -> Iterator[str]:
    """A 1 MiB body limit, so oversized bodies stay cheap to send."""
    with _serve(engine, api_key=KEY, max_body_bytes=MIB) as url:
        yield url


@pytest.fixture
def client(server: str) -> Any:
    return openai.OpenAI(base_url=f"{server}/v1", api_key=KEY, max_retries=0, timeout=60)


def _still_serving(url: str) -> None:
    reply = httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": MODEL, "messages": USER, "max_tokens": 2},
        headers=AUTH,
        timeout=60,
    )
    assert reply.status_code == 200, reply.text


def _assert_openai_error(response: httpx.Response, status: int | tuple[int, ...]) -> dict[str, Any]:
    statuses = (status,) if isinstance(status, int) else status
    assert response.status_code in statuses, (response.status_code, response.text[:500])
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"message", "type", "param", "code"}, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return body["error"]


# ---------------------------------------------------------------------------------------------- raw HTTP


def _raw_request(
    url: str, head: bytes, chunks: Iterable[bytes], timeout: float = 10.0
) -> tuple[int | None, bytes, int]:
    """Send ``head`` then ``chunks`` by hand, stopping as soon as the server answers or stops reading.

    Returns:
        The response status (None when none came within ``timeout``), the raw response, and how many body
        bytes were sent.
    """
    parts = urlsplit(url)
    sent = 0
    with socket.create_connection((parts.hostname, parts.port), timeout=timeout) as sock:
        sock.sendall(head)
        for chunk in chunks:
            readable, _, _ = select.select([sock], [], [], 0)
            if readable:  # the server answered (or closed) before the whole body was sent
                break
            try:
                sock.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError, TimeoutError):
                break
            sent += len(chunk)
        response = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                data = sock.recv(65536)
            except TimeoutError:
                break
            except ConnectionResetError:
                break
            if not data:
                break
            response += data
            head_end = response.find(b"\r\n\r\n")
            if head_end >= 0:
                length = next(
                    (
                        int(line.split(b":", 1)[1])
                        for line in response[:head_end].split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    None,
                )
                if length is not None and len(response) >= head_end + 4 + length:
                    break
    if not response.startswith(b"HTTP/1.1 "):
        return None, response, sent
    return int(response[9:12]), response, sent


def _json_of(raw: bytes) -> dict[str, Any]:
    return json.loads(raw.split(b"\r\n\r\n", 1)[1])


def _head(url: str, extra: str) -> bytes:
    port = urlsplit(url).port
    return (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {KEY}\r\n"
        f"Content-Type: application/json\r\n{extra}\r\n"
    ).encode()


# ---------------------------------------------------------------------------------------------- body and prompt limits


def test_declared_oversized_body_is_413_before_it_is_read(server: str) -> None:
    """A Content-Length over the 32 MiB default is refused on the headers: the body is never read."""
    declared = 33 * MIB
    status, raw, sent = _raw_request(
        server, _head(server, f"Content-Length: {declared}\r\n"), (b"x" * 65536 for _ in range(8)), timeout=10
    )
    assert status == 413, raw[:300]
    assert sent < declared
    error = _json_of(raw)["error"]
    assert "32" in error["message"] and error["code"] == "request_too_large"
    assert b"connection: close" in raw.lower()  # the rest of the body is not drained
    _still_serving(server)


def test_chunked_oversized_body_is_413_once_past_the_limit(small_server: str) -> None:
    """A chunked body (no Content-Length) is counted as it arrives and cut off past the limit."""

    def chunks() -> Iterator[bytes]:
        piece = b"x" * 65536
        for _ in range(1024):  # 64 MiB at most, 64 times the limit
            yield b"%x\r\n%s\r\n" % (len(piece), piece)

    status, raw, sent = _raw_request(small_server, _head(small_server, "Transfer-Encoding: chunked\r\n"), chunks())
    assert status == 413, raw[:300]
    # The server stopped reading at the limit: past what the sockets' buffers absorb, sending failed.
    assert sent < 16 * MIB
    assert _json_of(raw)["error"]["code"] == "request_too_large"
    _still_serving(small_server)


def test_oversized_body_through_the_openai_client_is_a_413_status(small_server: str) -> None:
    """Real clients see the 413 (not a broken connection) for a body just over the limit."""
    client = openai.OpenAI(base_url=f"{small_server}/v1", api_key=KEY, max_retries=0, timeout=30)
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x" * (MIB + 1000)}])
    assert info.value.status_code == 413


def test_body_under_the_limit_is_still_read(small_server: str) -> None:
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "y " * 300_000}]})
    assert len(body) < MIB
    headers = {**AUTH, "Content-Type": "application/json"}
    response = httpx.post(f"{small_server}/v1/chat/completions", content=body, headers=headers, timeout=60)
    error = _assert_openai_error(response, 400)  # read and judged: too long for the tiny model's context
    assert "context" in error["message"]


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "word " * 400_000}]}),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": [{"type": "text", "text": "z" * 2_000_000}]}]},
        ),
        ("/v1/completions", {"prompt": "word " * 400_000}),
        ("/v1/completions", {"prompt": list(range(100)) * 200}),
        ("/v1/embeddings", {"input": ["word " * 400_000]}),
    ],
    ids=["chat", "chat-parts", "completion-text", "completion-ids", "embeddings"],
)
def test_huge_prompt_is_refused_before_tokenizing(
    server: str, engine: Any, monkeypatch: pytest.MonkeyPatch, route: str, body: dict[str, Any]
) -> None:
    """A prompt that cannot fit the context is a 400 that says so, and the tokenizer never sees it."""
    seen: list[int] = []
    real_tokenizer = engine.tokenizer

    class _Spy:
        """Records the length of every text tokenized while the request runs."""

        def __getattr__(self, name: str) -> Any:
            return getattr(real_tokenizer, name)

        def __len__(self) -> int:
            return len(real_tokenizer)

        def __call__(self, text: Any, *args: Any, **kwargs: Any) -> Any:
            seen.append(len(text) if isinstance(text, str) else sum(len(t) for t in text))
            return real_tokenizer(text, *args, **kwargs)

    monkeypatch.setattr(engine, "tokenizer", _Spy())
    encoded: list[Any] = []
    real_encode = engine.encode
    monkeypatch.setattr(engine, "encode", lambda request: encoded.append(request) or real_encode(request))
    response = httpx.post(f"{server}{route}", json={"model": MODEL, **body}, headers=AUTH, timeout=60)
    error = _assert_openai_error(response, 400)
    assert error["code"] == "context_length_exceeded", error
    assert "context" in error["message"] and str(engine.max_model_len) in error["message"]
    assert not encoded and max(seen, default=0) < 100_000  # refused before the engine tokenized it
    monkeypatch.undo()
    _still_serving(server)


# ------------------------------------------------------------------------------ disconnects and the queue


class _SlowForward:
    """Wraps the model's forward pass: counts calls, sleeps a little, or blocks until released."""

    def __init__(self, engine: Any, delay: float = 0.0) -> None:
        self.real = engine.model.forward
        self.delay = delay
        self.calls = 0
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        self.entered.set()
        self.gate.wait(60)
        if self.delay:
            time.sleep(self.delay)
        return self.real(*args, **kwargs)


def _calls_settle(slow: _SlowForward, within: float) -> bool:
    """True when the forward-call count stops growing within ``within`` seconds."""
    deadline = time.monotonic() + within
    before = slow.calls
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = slow.calls
        if now == before:
            return True
        before = now
    return False


def test_disconnected_non_streaming_client_cancels_its_generation(
    server: str, engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow = _SlowForward(engine, delay=0.02)  # 900 tokens would take 18 s or more
    monkeypatch.setattr(engine.model, "forward", slow)
    body = {"model": MODEL, "messages": USER, "max_tokens": 900, "temperature": 0.7, "seed": 1}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server}/v1/chat/completions", json=body, headers=AUTH, timeout=1.0)
    assert slow.calls > 0
    assert _calls_settle(slow, within=5.0), "generation went on after its client disconnected"
    start = time.monotonic()
    _still_serving(server)
    assert time.monotonic() - start < 5.0  # the next request did not wait for the abandoned one


def test_disconnected_streaming_client_cancels_its_generation(
    server: str, engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow = _SlowForward(engine, delay=0.02)
    monkeypatch.setattr(engine.model, "forward", slow)
    body = {"model": MODEL, "messages": USER, "max_tokens": 900, "temperature": 0.7, "seed": 1, "stream": True}
    with httpx.stream("POST", f"{server}/v1/chat/completions", json=body, headers=AUTH, timeout=30) as response:
        assert response.status_code == 200
        next(response.iter_lines())
    assert _calls_settle(slow, within=5.0), "generation went on after its client disconnected"
    _still_serving(server)


def _queued(url: str) -> int:
    return int(httpx.get(f"{url}/health", headers=AUTH, timeout=10).json()["queued"])


def _wait_queued(url: str, count: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if _queued(url) == count:
            return True
        time.sleep(0.02)
    return False


def test_full_queue_is_429_with_retry_after(engine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    slow = _SlowForward(engine)
    slow.gate.clear()
    monkeypatch.setattr(engine.model, "forward", slow)
    body = {"model": MODEL, "messages": USER, "max_tokens": 2}
    with _serve(engine, api_key=KEY, max_queue=1) as url:
        results: list[int] = []

        def ask() -> None:
            results.append(httpx.post(f"{url}/v1/chat/completions", json=body, headers=AUTH, timeout=60).status_code)

        threads = [threading.Thread(target=ask) for _ in range(2)]
        try:
            threads[0].start()
            assert slow.entered.wait(30)  # the engine is busy with the first request
            threads[1].start()
            assert _wait_queued(url, 1)  # the second waits in the queue, which is now full
            refused = httpx.post(f"{url}/v1/chat/completions", json=body, headers=AUTH, timeout=10)
        finally:
            slow.gate.set()
            for thread in threads:
                thread.join(60)
        error = _assert_openai_error(refused, 429)
        assert error["type"] == "rate_limit_error" and "queue is full" in error["message"]
        assert int(refused.headers["retry-after"]) >= 1
        assert results == [200, 200]


def test_a_queued_request_whose_client_left_frees_its_slot(engine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    slow = _SlowForward(engine)
    slow.gate.clear()
    monkeypatch.setattr(engine.model, "forward", slow)
    body = {"model": MODEL, "messages": USER, "max_tokens": 2}
    with _serve(engine, api_key=KEY, max_queue=1) as url:
        running = threading.Thread(
            target=lambda: httpx.post(f"{url}/v1/chat/completions", json=body, headers=AUTH, timeout=60)
        )
        late: list[int] = []
        waiting = threading.Thread(
            target=lambda: late.append(
                httpx.post(f"{url}/v1/chat/completions", json=body, headers=AUTH, timeout=60).status_code
            )
        )
        try:
            running.start()
            assert slow.entered.wait(30)
            with pytest.raises(httpx.ReadTimeout):  # queued, then its client gives up
                httpx.post(f"{url}/v1/chat/completions", json=body, headers=AUTH, timeout=1.0)
            assert _wait_queued(url, 0, within=5.0), "the abandoned request kept its queue slot"
            waiting.start()
            assert _wait_queued(url, 1)
        finally:
            slow.gate.set()
            running.join(60)
            if waiting.is_alive():
                waiting.join(60)
        assert late == [200]


# ---------------------------------------------------------------------------------------------- error shapes


def _post_raw(url: str, path: str, content: bytes, content_type: str = "application/json") -> httpx.Response:
    return httpx.post(f"{url}{path}", content=content, headers={**AUTH, "Content-Type": content_type}, timeout=60)


BAD_BODIES: list[tuple[str, str, bytes, int]] = [
    ("invalid-json", "/v1/chat/completions", b'{"model": "tiny", "messages": [', 400),
    ("not-utf8", "/v1/chat/completions", b'{"model": "tiny", "messages": "\xff\xfe"}', 400),
    ("array-body", "/v1/chat/completions", b"[1, 2, 3]", 400),
    ("empty-body", "/v1/chat/completions", b"", 400),
    ("deep-nesting", "/v1/chat/completions", b"[" * 100_000 + b"]" * 100_000, 400),
    ("wrong-type-messages", "/v1/chat/completions", b'{"model": "tiny", "messages": "hi"}', 400),
    ("wrong-type-max-tokens", "/v1/chat/completions",
     b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": "many"}', 400),
    ("nan-temperature", "/v1/chat/completions",
     b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "temperature": NaN}', 400),
    ("infinite-penalty", "/v1/chat/completions",
     b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "repetition_penalty": Infinity}', 400),
    ("huge-seed", "/v1/chat/completions",
     b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "seed": 1180591620717411303424}', 400),
    ("content-is-a-number", "/v1/chat/completions", b'{"model": "tiny", "messages": [{"role": "user", "content": 5}]}',
     400),
    ("role-is-a-list", "/v1/chat/completions", b'{"model": "tiny", "messages": [{"role": [], "content": "hi"}]}', 400),
    ("lone-surrogate-content", "/v1/chat/completions",
     b'{"model": "tiny", "messages": [{"role": "user", "content": "a\\ud800b"}]}', 400),
    ("lone-surrogate-model", "/v1/chat/completions",
     b'{"model": "\\udfff", "messages": [{"role": "user", "content": "hi"}]}', (400, 404)),
    ("lone-surrogate-stream", "/v1/chat/completions",
     b'{"model": "tiny", "stream": true, "messages": [{"role": "user", "content": "\\ud83d"}]}', 400),
    ("unknown-model", "/v1/chat/completions", b'{"model": "nope", "messages": [{"role": "user", "content": "hi"}]}',
     404),
    ("completion-empty-id-list", "/v1/completions", b'{"model": "tiny", "prompt": [[]]}', 400),
    ("completion-bad-ids", "/v1/completions", b'{"model": "tiny", "prompt": [-1, 5]}', 400),
    ("completion-surrogate", "/v1/completions", b'{"model": "tiny", "prompt": "\\ud800"}', 400),
    ("embedding-negative-id", "/v1/embeddings", b'{"model": "tiny", "input": [[-1, 3]]}', 400),
    ("embedding-huge-id", "/v1/embeddings", b'{"model": "tiny", "input": [[1000000000]]}', 400),
    ("embedding-id-past-vocab", "/v1/embeddings", b'{"model": "tiny", "input": [5, 512]}', 400),
    ("embedding-empty-ids", "/v1/embeddings", b'{"model": "tiny", "input": [[]]}', 400),
    ("embedding-surrogate", "/v1/embeddings", b'{"model": "tiny", "input": "\\udc00"}', 400),
    ("embedding-bad-format", "/v1/embeddings", b'{"model": "tiny", "input": "hi", "encoding_format": "hex"}', 400),
    ("tiny-penalty", "/v1/completions", b'{"model": "tiny", "prompt": "hi", "repetition_penalty": 2.5e-48}', 400),
    ("string-for-int", "/v1/completions", b'{"model": "tiny", "prompt": "hi", "max_tokens": "5"}', 400),
    ("int-for-bool", "/v1/completions", b'{"model": "tiny", "prompt": "hi", "stream": 1}', 400),
    ("too-many-prompts", "/v1/completions", b'{"model": "tiny", "prompt": [' + b", ".join([b'"p"'] * 65) + b"]}", 400),
    ("too-many-stops", "/v1/completions", b'{"model": "tiny", "prompt": "x", "stop": [' + b'"s",' * 16 + b'"s"]}', 400),
    ("huge-model-name", "/v1/completions", b'{"model": "' + b"m" * 100_000 + b'", "prompt": "hi"}', 400),
    ("rerank-on-a-generator", "/v1/rerank", b'{"model": "tiny", "query": "q", "documents": ["d"]}', 400),
    ("classify-on-a-generator", "/v1/classify", b'{"model": "tiny", "input": "hi"}', 400),
]  # fmt: skip


@pytest.mark.parametrize(("path", "content", "status"), [c[1:] for c in BAD_BODIES], ids=[c[0] for c in BAD_BODIES])
def test_bad_bodies_get_a_4xx_in_the_openai_shape(
    server: str, path: str, content: bytes, status: int | tuple[int, ...]
) -> None:
    _assert_openai_error(_post_raw(server, path, content), status)
    _still_serving(server)


def test_vanishing_temperature_is_greedy_not_a_crash(server: str) -> None:
    """1e-300 divides the logits into infinities: the server samples greedily instead (as vLLM does)."""
    replies = []
    for temperature in (1e-300, 0):
        body = {"model": MODEL, "prompt": "The number twelve is", "max_tokens": 6, "temperature": temperature}
        response = httpx.post(f"{server}/v1/completions", json=body, headers=AUTH, timeout=60)
        assert response.status_code == 200, response.text
        replies.append(response.json()["choices"][0]["text"])
    assert replies[0] == replies[1]


def test_integral_floats_are_integers(server: str) -> None:
    body = {"model": MODEL, "prompt": [1.0, 2.0, 3.0], "max_tokens": 2.0}  # JSON Schema calls 2.0 an integer
    response = httpx.post(f"{server}/v1/completions", json=body, headers=AUTH, timeout=60)
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["prompt_tokens"] == 3


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [("GET", "/v1/nope", 404), ("GET", "/v1/chat/completions", 405), ("DELETE", "/v1/models", 405)],
)
def test_unknown_routes_and_methods_get_the_openai_shape(server: str, method: str, path: str, status: int) -> None:
    _assert_openai_error(httpx.request(method, f"{server}{path}", headers=AUTH, timeout=10), status)


def test_unknown_model_through_the_openai_client(client: Any) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.embeddings.create(model="nope", input="hi")
    assert info.value.body["code"] == "model_not_found"


# ---------------------------------------------------------------------------------------------- auth


@pytest.mark.parametrize("path", ["/docs", "/redoc", "/openapi.json", "/docs/oauth2-redirect"])
def test_docs_and_schema_are_off_by_default(server: str, path: str) -> None:
    for headers in ({}, AUTH):
        response = httpx.get(f"{server}{path}", headers=headers, timeout=10)
        assert response.status_code in (401, 404), (path, response.status_code)
        _assert_openai_error(response, (401, 404))


def test_docs_when_enabled_need_the_key(engine: Any) -> None:
    with _serve(engine, api_key=KEY, docs=True) as url:
        for path in ("/docs", "/redoc", "/openapi.json"):
            _assert_openai_error(httpx.get(f"{url}{path}", timeout=10), 401)
            assert httpx.get(f"{url}{path}", headers=AUTH, timeout=10).status_code == 200
        schema = httpx.get(f"{url}/openapi.json", headers=AUTH, timeout=10).json()
        assert "/v1/chat/completions" in schema["paths"]


def test_every_route_but_health_needs_the_key(server: str) -> None:
    routes = [
        ("GET", "/v1/models"),
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/completions"),
        ("POST", "/v1/embeddings"),
        ("POST", "/v1/rerank"),
        ("POST", "/v1/classify"),
        ("GET", "/openapi.json"),
        ("GET", "/docs"),
        ("GET", "/anything/else"),
        ("GET", "/"),
    ]
    for method, path in routes:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}, {"Authorization": "Basic x"}):
            response = httpx.request(method, f"{server}{path}", headers=headers, json={}, timeout=10)
            error = _assert_openai_error(response, 401)
            assert error["code"] == "invalid_api_key", (method, path)


def test_health_reveals_nothing_without_the_key(server: str) -> None:
    anonymous = httpx.get(f"{server}/health", timeout=10)
    assert anonymous.status_code == 200 and anonymous.json() == {"status": "ok"}
    detailed = httpx.get(f"{server}/health", headers=AUTH, timeout=10).json()
    assert detailed["status"] == "ok" and detailed["model"] == MODEL and "queued" in detailed


def test_an_empty_api_key_is_refused_by_build_app(engine: Any) -> None:
    from swiftcore_serve import ServerConfig, build_app

    with pytest.raises(ValueError, match="empty"):
        build_app(engine, ServerConfig(model_name=MODEL, api_key=""))


# ---------------------------------------------------------------------------------------------- the CLI's key handling


class _FakeEngine:
    backend = "fake"

    def close(self) -> None:
        pass


@pytest.fixture
def deploy_cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """Run ``swiftcore deploy`` with a fake engine and a ``serve`` that records its config instead of serving."""
    import swiftcore_serve as server_module
    import swiftcore_serve.command as deploy_cmd

    from swiftcore.cli.main import main

    served: dict[str, Any] = {}
    monkeypatch.delenv("SWIFTCORE_API_KEY", raising=False)
    monkeypatch.setattr(deploy_cmd, "build_head_engine", lambda *a, **k: None)
    monkeypatch.setattr(deploy_cmd, "build_engine", lambda *a, **k: _FakeEngine())
    monkeypatch.setattr(server_module, "serve", lambda engine, config, **kw: served.update(config=config, **kw))
    model = tmp_path / "model"
    model.mkdir()

    def run(*args: str) -> tuple[int, dict[str, Any]]:
        served.clear()
        return main(["deploy", "--model", str(model), *args]), dict(served)

    return run


def test_cli_refuses_an_empty_key(deploy_cli: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    code, served = deploy_cli("--api-key", "")
    assert code == 2 and not served
    empty = tmp_path / "empty.key"
    empty.write_text("\n")
    code, served = deploy_cli("--api-key-file", str(empty))
    assert code == 2 and not served
    monkeypatch.setenv("SWIFTCORE_API_KEY", "")
    code, served = deploy_cli()
    assert code == 2 and not served


def test_cli_needs_a_key_or_an_explicit_no_key_on_loopback(deploy_cli: Any) -> None:
    code, served = deploy_cli()
    assert code == 2 and not served
    code, served = deploy_cli("--no-api-key")
    assert code == 0 and served["config"].api_key is None
    code, served = deploy_cli("--no-api-key", "--host", "0.0.0.0")
    assert code == 2 and not served
    code, served = deploy_cli("--no-api-key", "--api-key", "abcdefgh")
    assert code == 2 and not served
    code, served = deploy_cli("--api-key", "abc def")  # not a header-safe token
    assert code == 2 and not served


def test_cli_reads_the_key_from_a_file_or_the_environment(
    deploy_cli: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    key_file = tmp_path / "api.key"
    key_file.write_text("from-a-file-123\n")
    key_file.chmod(0o600)
    code, served = deploy_cli("--api-key-file", str(key_file))
    assert code == 0 and served["config"].api_key == "from-a-file-123"
    monkeypatch.setenv("SWIFTCORE_API_KEY", "from-the-env-456")
    code, served = deploy_cli()
    assert code == 0 and served["config"].api_key == "from-the-env-456"
    code, served = deploy_cli("--host", "0.0.0.0")  # a key makes a public bind allowed
    assert code == 0 and served["host"] == "0.0.0.0"
    code, served = deploy_cli("--api-key-file", str(key_file))  # the command line wins over the environment
    assert code == 0 and served["config"].api_key == "from-a-file-123"
    code, served = deploy_cli("--no-api-key")  # a key in the environment contradicts it
    assert code == 2 and not served


def test_cli_passes_the_limits(deploy_cli: Any) -> None:
    code, served = deploy_cli("--no-api-key", "--max-body-mb", "2", "--max-queue", "7", "--allowed-host", "my.box")
    assert code == 0
    config = served["config"]
    assert config.max_body_bytes == 2 * MIB and config.max_queue == 7 and "my.box" in config.allowed_hosts


# ---------------------------------------------------------------------------------------------- /v1/models, Host header


def test_models_show_names_never_paths(server: str, engine: Any) -> None:
    data = httpx.get(f"{server}/v1/models", headers=AUTH, timeout=10).json()["data"]
    assert [m["id"] for m in data] == [MODEL]
    text = json.dumps(data)
    assert str(engine.base_dir) not in text and str(Path.home()) not in text and '"/' not in text


def test_errors_name_the_model_not_its_directory(server: str, engine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from swiftcore_infer import InvalidRequestError

    def refuse(request: Any) -> list[int]:
        raise InvalidRequestError(f"the model at {engine.base_dir} cannot do that")

    monkeypatch.setattr(engine, "encode", refuse)
    response = httpx.post(
        f"{server}/v1/chat/completions", json={"model": MODEL, "messages": USER}, headers=AUTH, timeout=60
    )
    error = _assert_openai_error(response, 400)
    assert error["message"] == f"the model at {MODEL} cannot do that"


@pytest.mark.parametrize(
    ("host", "ok"),
    [
        ("127.0.0.1:{port}", True),
        ("localhost:{port}", True),
        ("LOCALHOST", True),
        ("[::1]:{port}", True),
        ("evil.example", False),
        ("evil.example:{port}", False),
        ("127.0.0.1.evil.example", False),
        ("localhost.evil.example:{port}", False),
        ("192.168.1.10:{port}", False),
    ],
)
def test_loopback_bind_checks_the_host_header(server: str, host: str, ok: bool) -> None:
    """DNS rebinding: a page on evil.example whose name now resolves to 127.0.0.1 must not reach the API."""
    port = urlsplit(server).port
    response = httpx.get(f"{server}/v1/models", headers={**AUTH, "Host": host.format(port=port)}, timeout=10)
    if ok:
        assert response.status_code == 200
    else:
        error = _assert_openai_error(response, 421)
        assert "Host" in error["message"]
    health = httpx.get(f"{server}/health", headers={"Host": host.format(port=port)}, timeout=10)
    assert health.status_code == (200 if ok else 421)


def test_allowed_hosts_extend_the_loopback_names(engine: Any) -> None:
    with _serve(engine, api_key=KEY, allowed_hosts=("api.internal",)) as url:
        good = httpx.get(f"{url}/v1/models", headers={**AUTH, "Host": "api.internal"}, timeout=10)
        assert good.status_code == 200
        _assert_openai_error(httpx.get(f"{url}/v1/models", headers={**AUTH, "Host": "evil.example"}, timeout=10), 421)
