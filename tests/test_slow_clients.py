"""Slow clients (issue 46): a bounded slowloris against ``swiftcore deploy``'s and ``swiftcore rollout``'s apps on
swiftcore's listener (:mod:`swiftcore_serve.listener`, the uvicorn settings both commands run with).

Twenty connections trickle their request headers a byte at a time; while they do, the server keeps answering real
requests, and once the header deadline has passed it has closed every one of them (uvicorn's defaults keep them open
for as long as the bytes keep coming). The header deadline is shortened to 1 s here; the commands use
:data:`~swiftcore_serve.HEADER_TIMEOUT_S`, which the last test checks they are given.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

KEY = "slow-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
SLOW_CLIENTS = 20
HEADER_TIMEOUT = 1.0


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from swiftcore_testing import make_tiny_qwen3

    return make_tiny_qwen3(tmp_path_factory.mktemp("slow") / "tiny")


def _deploy_app(tiny_dir: Any) -> Any:
    from swiftcore_infer import TransformersEngine
    from swiftcore_serve import ServerConfig, build_app
    from swiftcore_testing import plugins_with_tiny_qwen3

    engine = TransformersEngine(tiny_dir, plugins_with_tiny_qwen3())
    return build_app(engine, ServerConfig(model_name="tiny", api_key=KEY, default_max_tokens=2))


def _rollout_app(tiny_dir: Any) -> Any:
    from swiftcore_infer import MediaPolicy, TransformersEngine
    from swiftcore_recipe_rl.rollout_server import RolloutService, create_app
    from swiftcore_testing import plugins_with_tiny_qwen3

    engine = TransformersEngine(tiny_dir, plugins_with_tiny_qwen3())
    service = RolloutService(engine, identity={"fingerprint": "f"}, media=MediaPolicy(), max_requests=8)
    return create_app(service, max_body_bytes=2**20, api_key=KEY)


def _deploy_answers(url: str) -> bool:
    reply = httpx.post(f"{url}/v1/completions", json={"model": "tiny", "prompt": "hi", "max_tokens": 2}, headers=AUTH,
                       timeout=30)  # fmt: skip
    return reply.status_code == 200


def _rollout_answers(url: str) -> bool:
    reply = httpx.post(f"{url}/rollouts", json={"requests": [{"prompt": [1, 2], "sampling": {"max_new_tokens": 2}}]},
                       headers=AUTH, timeout=30)  # fmt: skip
    return reply.status_code == 200


SERVERS = {"deploy": (_deploy_app, _deploy_answers), "rollout": (_rollout_app, _rollout_answers)}


@pytest.fixture(params=sorted(SERVERS))
def served(request: pytest.FixtureRequest, tiny_dir: Any) -> Iterator[tuple[str, Callable[[str], bool]]]:
    from swiftcore_serve import Listener

    build, answers = SERVERS[request.param]
    with Listener(build(tiny_dir), host="127.0.0.1", port=0, header_timeout=HEADER_TIMEOUT) as url:
        yield url, answers


def _closed(sock: socket.socket) -> bool:
    """Whether the server closed ``sock`` (EOF or reset); False while it is still open."""
    try:
        sock.send(b"X")  # one more header byte, as a slowloris sends
        sock.settimeout(0.05)
        return sock.recv(1024) == b""
    except (TimeoutError, BlockingIOError):
        return False
    except OSError:
        return True


def test_a_slowloris_is_cut_off_and_real_requests_are_answered(served: tuple[str, Callable[[str], bool]]) -> None:
    url, answers = served
    port = int(url.rsplit(":", 1)[1])
    slow = []
    for _ in range(SLOW_CLIENTS):
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        slow.append(sock)
    try:
        deadline = time.monotonic() + HEADER_TIMEOUT + 4.0
        answered = 0
        while time.monotonic() < deadline and not all(_closed(s) for s in slow):
            assert answers(url), "a real request was not answered while the slow clients trickled"
            answered += 1
            time.sleep(0.2)
        still_open = [s for s in slow if not _closed(s)]
        assert not still_open, f"{len(still_open)} of {SLOW_CLIENTS} slow-header connections are still open"
        assert answered >= 1 and answers(url)
    finally:
        for sock in slow:
            sock.close()


def test_both_commands_listen_with_the_header_deadline(monkeypatch: pytest.MonkeyPatch, tiny_dir: Any) -> None:
    """``swiftcore_serve.serve`` (deploy) and the rollout server's ``serve`` run uvicorn with swiftcore's config."""
    import uvicorn
    from swiftcore_infer import TransformersEngine
    from swiftcore_recipe_rl import rollout_server
    from swiftcore_serve import HEADER_TIMEOUT_S, ServerConfig, serve
    from swiftcore_serve.listener import KEEP_ALIVE_S, MAX_HEADER_BYTES
    from swiftcore_testing import plugins_with_tiny_qwen3

    configs: list[Any] = []
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, *a, **k: configs.append(self.config))
    engine = TransformersEngine(tiny_dir, plugins_with_tiny_qwen3())
    serve(engine, ServerConfig(model_name="tiny", api_key=KEY), host="127.0.0.1", port=1)
    rollout_server.serve(engine, host="127.0.0.1", port=1, api_key=KEY)
    assert len(configs) == 2
    for config in configs:
        assert config.http.__name__ == "HeaderTimeoutProtocol" and not config.server_header
        assert config.timeout_keep_alive == KEEP_ALIVE_S and config.h11_max_incomplete_event_size == MAX_HEADER_BYTES
    assert HEADER_TIMEOUT_S <= 30
