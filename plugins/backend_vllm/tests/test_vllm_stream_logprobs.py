"""The vLLM engine's streamed pieces with ``sampling.logprobs``: each carries its tokens' entries from vLLM's own
sample log-probs of the step that generated them (``logprobs=k`` on vLLM's request, delta outputs), the raw values a
separate scoring pass (:meth:`Engine.completion_logprobs`: vLLM's ``prompt_logprobs``) gives the finished reply, the
same alternatives in the same order. An engine whose log-probs are processed (RL rollouts) streams token ids only."""

from __future__ import annotations

from typing import Any

import pytest
from swiftcore_infer import Request, SamplingParams

pytestmark = pytest.mark.slow

RECORD = {"messages": [{"role": "user", "content": "Is 12 even or odd?"}]}
#: How far a streamed entry (vLLM's sampler, one new token over the KV cache) may be from the rescored one (vLLM's
#: prompt_logprobs over prompt + reply at once): float32 rounding of two computations, as the transformers engine's
#: (plugins/infer/tests/test_stream_logprobs_live.py); processed log-probs (temperature 2) are off by > 0.1.
GAP = 5e-5


@pytest.fixture(scope="module")
def engine() -> Any:
    """The process's shared vLLM engine (one start for every vLLM test module)."""
    from swiftcore_backend_vllm.testing import shared_setup

    return shared_setup().engine


def _stream(engine: Any, **sampling: Any) -> tuple[Request, list[Any]]:
    request = Request(record=RECORD, sampling=SamplingParams(**sampling))
    return request, list(engine.stream(request))


@pytest.mark.parametrize(
    "sampling",
    [
        {"temperature": 0.0},
        # sampled at temperature 2 from the 3 most likely: the entries are still the raw (temperature 1) log-probs
        {"temperature": 2.0, "top_k": 3, "seed": 7},
    ],
    ids=["greedy", "sampled"],
)
def test_streamed_logprobs_are_the_rescored_reply_s(engine: Any, sampling: dict[str, Any]) -> None:
    top = 3
    request, deltas = _stream(engine, max_new_tokens=16, logprobs=top, **sampling)
    final = deltas[-1].final
    assert final is not None and len(final.token_ids) >= 4
    for d in deltas:  # every piece carries its own tokens' entries, live (no scoring pass involved)
        assert d.logprobs is not None and [e.token_id for e in d.logprobs] == d.token_ids
    live = [e for d in deltas for e in d.logprobs]
    ids, rescored = engine.completion_logprobs(request, final.token_ids, top_logprobs=top)
    assert ids == final.token_ids == [e.token_id for e in live]
    assert [e.logprob for e in live] == pytest.approx([e.logprob for e in rescored], abs=GAP)
    for a, b in zip(live, rescored, strict=True):
        assert len(a.top) == top and [t for t, _ in a.top] == [t for t, _ in b.top]  # most likely first
        assert [v for _, v in a.top] == pytest.approx([v for _, v in b.top], abs=GAP)
    if not request.sampling.greedy:  # really sampled off the greedy path: not every token is the most likely one
        assert any(e.token_id != e.top[0][0] for e in live)


def test_a_batch_scores_only_the_rows_that_ask(engine: Any) -> None:
    asks = Request(record=RECORD, sampling=SamplingParams(max_new_tokens=6, logprobs=0))
    plain = Request(record=RECORD, sampling=SamplingParams(max_new_tokens=6))
    pieces: dict[int, list[Any]] = {0: [], 1: []}
    for index, piece in engine.stream_many([asks, plain]):
        pieces[index].append(piece)
    assert all(p.logprobs is not None and all(e.top == () for e in p.logprobs) for p in pieces[0])
    assert [e.token_id for p in pieces[0] for e in p.logprobs] == pieces[0][-1].final.token_ids
    assert all(p.logprobs is None for p in pieces[1])
    assert pieces[0][-1].final.token_ids == pieces[1][-1].final.token_ids  # the same greedy reply


def test_processed_logprobs_engine_streams_ids_only(engine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine started with ``logprobs_mode='processed_logprobs'`` (create_rollout_engine's): its sample log-probs
    are not the raw ones a reply is scored with, so its pieces carry none (the server scores the whole reply). The
    mode is read per request from vLLM's config; set here rather than starting a second engine."""
    monkeypatch.setattr(engine.llm.llm_engine.model_config, "logprobs_mode", "processed_logprobs")
    _, deltas = _stream(engine, max_new_tokens=8, logprobs=2)
    assert all(d.logprobs is None for d in deltas)
    assert [t for d in deltas for t in d.token_ids] == deltas[-1].final.token_ids
