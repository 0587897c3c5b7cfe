"""Streamed log-probabilities on the vLLM backend, through swiftcore-serve's app and the real ``openai`` client: the
chunks' entries are vLLM's own live ones (no scoring pass during a streamed request) and equal the non-streamed
reply's, for chat and ``/v1/completions``. The transformers backend's case, and the chunk rules, are in
``plugins/serve/tests/test_stream_logprobs.py``; the engine-level check in
``plugins/backend_vllm/tests/test_vllm_stream_logprobs.py``. Here (the cross-package tests) because it needs the
vLLM plugin's shared test engine."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

openai = pytest.importorskip("openai")

#: As ``plugins/serve/tests/test_stream_logprobs.py``'s: live vs rescored entries (measured 0.0 on vLLM's CPU build).
LIVE_GAP = 5e-5
MODEL = "tiny"
USER = [{"role": "user", "content": "Is 12 even or odd?"}]
TOP = 2
MAX_TOKENS = 16


def _chat_stream(client: Any) -> list[Any]:
    stream = client.chat.completions.create(
        model=MODEL, messages=USER, logprobs=True, top_logprobs=TOP, max_tokens=MAX_TOKENS, temperature=0, stream=True
    )
    return [c for c in stream if c.choices]


def _same_chat_entries(streamed: list[Any], whole: list[Any]) -> None:
    assert [e.token for e in streamed] == [e.token for e in whole]
    assert [e.logprob for e in streamed] == pytest.approx([e.logprob for e in whole], abs=LIVE_GAP)
    for got, want in zip(streamed, whole, strict=True):
        assert [t.token for t in got.top_logprobs] == [t.token for t in want.top_logprobs]
        want_values = [t.logprob for t in want.top_logprobs]
        assert [t.logprob for t in got.top_logprobs] == pytest.approx(want_values, abs=LIVE_GAP)


@pytest.fixture(scope="module")
def vllm() -> Iterator[tuple[Any, Any]]:
    """The process's shared vLLM engine (one start for every vLLM test module) served in this process:
    ``(client, engine)``."""
    pytest.importorskip("swiftcore_backend_vllm")
    from swiftcore_backend_vllm.testing import shared_setup
    from swiftcore_serve import ServerConfig, build_app
    from swiftcore_testing import ServerThread

    engine = shared_setup().engine
    with ServerThread(build_app(engine, ServerConfig(model_name=MODEL))) as url:
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=300), engine


@pytest.mark.slow
def test_streamed_logprobs_on_the_vllm_backend(vllm: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """The same on vLLM through the server: chat and completion, streamed and not; the streamed requests are never
    scored (their chunks' entries are the engine's live ones)."""
    client, engine = vllm
    whole = client.chat.completions.create(
        model=MODEL, messages=USER, logprobs=True, top_logprobs=TOP, max_tokens=MAX_TOKENS, temperature=0
    )
    kwargs = {"model": MODEL, "prompt": "Twelve is", "logprobs": TOP, "max_tokens": MAX_TOKENS, "temperature": 0}
    plain = client.completions.create(**kwargs).choices[0]
    scored: list[int] = []  # scoring passes during the streamed requests: none, they are live
    completion_logprobs = engine.completion_logprobs

    def counted(*args: Any, **kw: Any) -> Any:
        scored.append(1)
        return completion_logprobs(*args, **kw)

    monkeypatch.setattr(engine, "completion_logprobs", counted)
    chunks = _chat_stream(client)
    parts = [c.choices[0] for c in client.completions.create(**kwargs, stream=True)]
    monkeypatch.undo()
    assert not scored, "a streamed request was scored after generation instead of streamed live"
    streamed = [e for c in chunks if c.choices[0].logprobs is not None for e in c.choices[0].logprobs.content]
    assert len(whole.choices[0].logprobs.content) >= 2
    _same_chat_entries(streamed, whole.choices[0].logprobs.content)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == whole.choices[0].message.content
    assert "".join(c.text for c in parts) == plain.text
    got = [v for c in parts if c.logprobs is not None for v in c.logprobs.token_logprobs]
    assert [t for c in parts if c.logprobs is not None for t in c.logprobs.tokens] == plain.logprobs.tokens
    assert got == pytest.approx(plain.logprobs.token_logprobs, abs=LIVE_GAP)
    tops = [t for c in parts if c.logprobs is not None for t in c.logprobs.top_logprobs]
    assert [list(t) for t in tops] == [list(t) for t in plain.logprobs.top_logprobs]
    for t, w in zip(tops, plain.logprobs.top_logprobs, strict=True):
        assert list(t.values()) == pytest.approx(list(w.values()), abs=LIVE_GAP)
