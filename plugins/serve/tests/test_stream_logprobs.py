"""Streamed log-probabilities, driven by the real ``openai`` client against ``swiftcore deploy`` of a tiny Qwen3
(transformers backend). A greedy streamed request's chunk ``logprobs`` put together are the non-streamed reply's
(the same tokens, values to ``LIVE_GAP``, the same alternatives), for chat (``logprobs.content``) and for
``/v1/completions`` (the legacy lists), and each chunk carries the tokens of its own text. Text the stream parser
holds back (from the tool-call marker on, sent parsed at the end) keeps its entries: they come with empty deltas.
The transformers engine's entries are live (from the forward passes that generate the tokens, sent as they are
generated; vLLM's, also live: ``tests/test_stream_logprobs_vllm.py``); an engine that streams token ids only has
the whole reply scored, with the same entries."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

#: How far a live entry (from the forward pass that generated the token, one row, KV cache) may be from the rescored
#: non-streamed one (one pass over prompt + reply): float32 rounding of two computations. Measured on an AVX2-only
#: CPU, tiny Qwen3: up to 8.8e-6 on this file's requests, 1.7e-5 over 32 tokens and top 5; a wrong value (logits
#: halved, processed instead of raw) is off by 0.5 to 1.5.
LIVE_GAP = 5e-5

openai = pytest.importorskip("openai")

MODEL = "tiny"
USER = [{"role": "user", "content": "Is 12 even or odd?"}]
TOP = 2
MAX_TOKENS = 16


def _chars(text: str) -> str:
    """``text`` without U+FFFD: the random model writes tokens that end inside a multi-byte character, and how many
    replacement characters their bytes decode to depends on what is decoded with them (alone, or in the whole text)
    and on where the stream cut the text (it holds a last U+FFFD back until the character is whole)."""
    return text.replace("\ufffd", "")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from swiftcore_testing import make_tiny_qwen3

    return make_tiny_qwen3(tmp_path_factory.mktemp("stream_logprobs") / "tiny")


@pytest.fixture(scope="module")
def client(model_dir: Path) -> Iterator[Any]:
    """An ``openai`` client of ``swiftcore deploy --model <tiny Qwen3>``, started as a user starts it."""
    from swiftcore_testing import deploy_process, user_env

    env = user_env(SWIFTCORE_PLUGINS="swiftcore_testing.engines,template_qwen", OMP_NUM_THREADS="1")
    with deploy_process("--model", str(model_dir), "--no-api-key", served_model_name=MODEL, env=env) as (base, _):
        yield openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=120)


def _same_chat_entries(streamed: list[Any], whole: list[Any]) -> None:
    """Chat ``logprobs.content`` entries: the same tokens and bytes, values to LIVE_GAP, the same alternatives."""
    assert [e.token for e in streamed] == [e.token for e in whole]
    assert [e.bytes for e in streamed] == [e.bytes for e in whole]
    assert [e.logprob for e in streamed] == pytest.approx([e.logprob for e in whole], abs=LIVE_GAP)
    for got, want in zip(streamed, whole, strict=True):
        assert len(got.top_logprobs) == len(want.top_logprobs) == TOP
        assert [t.token for t in got.top_logprobs] == [t.token for t in want.top_logprobs]
        want_values = [t.logprob for t in want.top_logprobs]
        assert [t.logprob for t in got.top_logprobs] == pytest.approx(want_values, abs=LIVE_GAP)


def _chat_stream(client: Any) -> list[Any]:
    stream = client.chat.completions.create(
        model=MODEL, messages=USER, logprobs=True, top_logprobs=TOP, max_tokens=MAX_TOKENS, temperature=0, stream=True
    )
    return [c for c in stream if c.choices]


def test_streamed_chat_logprobs_are_the_whole_reply_s(client: Any) -> None:
    whole = client.chat.completions.create(
        model=MODEL, messages=USER, logprobs=True, top_logprobs=TOP, max_tokens=MAX_TOKENS, temperature=0
    )
    expected = whole.choices[0].logprobs.content
    assert len(expected) == whole.usage.completion_tokens - (whole.choices[0].finish_reason == "stop") >= 2
    chunks = _chat_stream(client)
    streamed = [e for c in chunks if c.choices[0].logprobs is not None for e in c.choices[0].logprobs.content]
    _same_chat_entries(streamed, expected)
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == whole.choices[0].message.content
    # the tiny model's reply has no thinking block nor tool call: its text is its tokens' (the ends stripped)
    assert _chars(text) == _chars("".join(e.token for e in streamed).strip())
    with_text = [c for c in chunks if (c.choices[0].delta.content or "").strip()]
    assert len(with_text) >= 2  # streamed in several pieces, each with entries of its own
    for c in with_text:
        assert c.choices[0].logprobs is not None and c.choices[0].logprobs.content
        assert _chars(c.choices[0].delta.content.strip()) in _chars(
            "".join(e.token for e in c.choices[0].logprobs.content)
        )


def test_streamed_completion_logprobs_are_the_whole_completion_s(client: Any) -> None:
    kwargs = {"model": MODEL, "prompt": "Twelve is", "logprobs": TOP, "max_tokens": MAX_TOKENS, "temperature": 0}
    whole = client.completions.create(**kwargs).choices[0]
    chunks = [c.choices[0] for c in client.completions.create(**kwargs, stream=True)]
    parts = [c.logprobs for c in chunks if c.logprobs is not None]
    tokens = [t for p in parts for t in p.tokens]
    assert len(whole.logprobs.tokens) >= 2 and tokens == whole.logprobs.tokens
    got = [v for p in parts for v in p.token_logprobs]
    assert got == pytest.approx(whole.logprobs.token_logprobs, abs=LIVE_GAP)
    tops = [t for p in parts for t in p.top_logprobs]
    assert [list(t) for t in tops] == [list(t) for t in whole.logprobs.top_logprobs]
    for t, w in zip(tops, whole.logprobs.top_logprobs, strict=True):
        assert list(t.values()) == pytest.approx(list(w.values()), abs=LIVE_GAP)
    assert [o for p in parts for o in p.text_offset] == whole.logprobs.text_offset
    text = "".join(c.text for c in chunks)
    assert text == whole.text and _chars(text) == _chars("".join(tokens))
    assert len([c for c in chunks if c.text]) >= 2
    for c in chunks:  # each chunk carries the tokens of its own text
        assert _chars(c.text) == _chars("".join(c.logprobs.tokens if c.logprobs is not None else []))
    assert chunks[-1].finish_reason == whole.finish_reason


@pytest.fixture(scope="module")
def in_process(model_dir: Path) -> Iterator[tuple[Any, Any]]:
    """The same checkpoint served in this process (its engine's template reachable): ``(client, app)``."""
    from swiftcore_infer import TransformersEngine
    from swiftcore_serve import ServerConfig, build_app
    from swiftcore_testing import ServerThread, plugins_with_tiny_qwen3

    app = build_app(TransformersEngine(model_dir, plugins_with_tiny_qwen3()), ServerConfig(model_name=MODEL))
    with ServerThread(app) as url:
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=120), app


def test_text_held_back_by_the_stream_parser_keeps_its_entries(
    in_process: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, app = in_process
    whole = client.chat.completions.create(
        model=MODEL, messages=USER, logprobs=True, top_logprobs=TOP, max_tokens=MAX_TOKENS, temperature=0
    )
    content, expected = whole.choices[0].message.content, whole.choices[0].logprobs.content
    # The template's tool-call marker (what a template declares as tool_call_start), set to a piece of this very
    # reply: the stream parser holds everything from it on for the final parse, which finds no call in it.
    cut = len(content) // 2
    while content[cut].isspace() or content.index(content[cut : cut + 3]) != cut:
        cut += 1
    monkeypatch.setattr(app.state.engine.template, "tool_call_start", content[cut : cut + 3], raising=False)
    chunks = _chat_stream(client)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == content[:cut].rstrip()  # the rest held back
    streamed = [e for c in chunks if c.choices[0].logprobs is not None for e in c.choices[0].logprobs.content]
    _same_chat_entries(streamed, expected)  # the held-back tokens' entries too
    empty = [c for c in chunks if c.choices[0].logprobs is not None and not c.choices[0].delta.content]
    assert empty, "the held-back tokens' entries come with empty deltas"


def test_streamed_logprobs_are_live(in_process: tuple[Any, Any]) -> None:
    """The first chunk with entries reaches the client while the engine is still held before the forward pass that
    generates the reply's last token (a pre-hook on the model blocks it until the client has that chunk): the
    entries are sent as the tokens are generated, not once the whole reply is scored."""
    import threading

    client, app = in_process
    whole = client.chat.completions.create(
        model=MODEL, messages=USER, logprobs=True, top_logprobs=TOP, max_tokens=MAX_TOKENS, temperature=0
    )
    last = whole.usage.completion_tokens  # forward passes of the stream: one per token, the stop token's included
    assert last >= 2
    received = threading.Event()
    forwards: list[bool] = []  # one per forward pass; the last token's: whether the client's chunk released it

    def hold_the_last_token(module: Any, args: Any, kwargs: Any) -> None:
        forwards.append(False)
        if len(forwards) == last:  # the client's own arrival releases it; the bound only ends a deadlock
            forwards[-1] = received.wait(timeout=60)

    hook = app.state.engine.model.register_forward_pre_hook(hold_the_last_token, with_kwargs=True)
    try:
        stream = client.chat.completions.create(
            model=MODEL,
            messages=USER,
            logprobs=True,
            top_logprobs=TOP,
            max_tokens=MAX_TOKENS,
            temperature=0,
            stream=True,
        )
        chunks = []
        for c in stream:
            if c.choices and c.choices[0].logprobs is not None and c.choices[0].logprobs.content:
                received.set()
            chunks.append(c)
    finally:
        hook.remove()
    # (the forward passes after the stream's, if any, are a scoring pass's)
    assert len(forwards) >= last and forwards[last - 1], "no chunk with entries came before the last token's forward"
    streamed = [
        e for c in chunks if c.choices and c.choices[0].logprobs is not None for e in c.choices[0].logprobs.content
    ]
    _same_chat_entries(streamed, whole.choices[0].logprobs.content)


def test_an_engine_without_live_logprobs_has_the_whole_reply_scored(
    in_process: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An engine whose stream reports no log-probs (its backend yields token ids only, as SGLang's): the chunks come
    once the reply is scored, with the same entries."""
    client, app = in_process
    engine = app.state.engine
    stream_many_ids = engine._stream_many_ids

    def ids_only(*args: Any, **kwargs: Any) -> Any:
        for row, ids, *_ in stream_many_ids(*args, **kwargs):
            yield row, ids

    monkeypatch.setattr(engine, "_stream_many_ids", ids_only)
    whole = client.chat.completions.create(
        model=MODEL, messages=USER, logprobs=True, top_logprobs=TOP, max_tokens=MAX_TOKENS, temperature=0
    )
    chunks = _chat_stream(client)
    streamed = [e for c in chunks if c.choices[0].logprobs is not None for e in c.choices[0].logprobs.content]
    _same_chat_entries(streamed, whole.choices[0].logprobs.content)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == whole.choices[0].message.content
