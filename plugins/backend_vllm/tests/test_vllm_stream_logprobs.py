"""The vLLM engine's streamed pieces with ``sampling.logprobs``: each carries its tokens' entries from vLLM's own
sample log-probs of the step that generated them (``logprobs=k`` on vLLM's request, delta outputs), the raw values a
separate scoring pass (:meth:`Engine.completion_logprobs`: vLLM's ``prompt_logprobs``) gives the finished reply, the
same alternatives in the same order. An engine whose log-probs are processed (RL rollouts) streams token ids only."""

from __future__ import annotations

from typing import Any

import pytest
from swiftcore_infer import Request, SamplingParams
from swiftcore_testing import check_batch_streams_logprobs_only_where_asked, check_live_stream_logprobs

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


@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "sampled"])
def test_streamed_logprobs_are_the_rescored_reply_s(engine: Any, sampled: bool) -> None:
    check_live_stream_logprobs(engine, RECORD, sampled=sampled, gap=GAP)


def test_a_batch_scores_only_the_rows_that_ask(engine: Any) -> None:
    check_batch_streams_logprobs_only_where_asked(engine, RECORD)


def test_processed_logprobs_engine_streams_ids_only(engine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine started with ``logprobs_mode='processed_logprobs'`` (create_rollout_engine's): its sample log-probs
    are not the raw ones a reply is scored with, so its pieces carry none (the server scores the whole reply). The
    mode is read per request from vLLM's config; set here rather than starting a second engine."""
    monkeypatch.setattr(engine.llm.llm_engine.model_config, "logprobs_mode", "processed_logprobs")
    _, deltas = _stream(engine, max_new_tokens=8, logprobs=2)
    assert all(d.logprobs is None for d in deltas)
    assert [t for d in deltas for t in d.token_ids] == deltas[-1].final.token_ids
