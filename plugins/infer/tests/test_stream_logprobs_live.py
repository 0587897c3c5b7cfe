"""The transformers engine's streamed pieces: each carries every token generated since the piece before (steps that
sent no text included, the last piece's too), and, when the request's ``sampling.logprobs`` asks, each token's raw
log-prob and alternatives from the very forward pass that generated it: the values a separate scoring pass
(:meth:`Engine.completion_logprobs`) gives the finished reply, to 1e-5 in float32."""

from __future__ import annotations

from typing import Any

import pytest
from swiftcore_infer.errors import InvalidRequestError
from swiftcore_infer.types import Request, SamplingParams
from swiftcore_testing import check_batch_streams_logprobs_only_where_asked, check_live_stream_logprobs

RECORD = {"messages": [{"role": "user", "content": "Is 12 even or odd?"}]}
#: A stop string the reply never writes: the engine holds back its length less one character of text, so the first
#: steps send no text and their tokens must ride with a later piece.
NEVER = "@@never-written@@"


def _stream(engine: Any, **sampling: Any) -> tuple[Request, list[Any]]:
    request = Request(record=RECORD, sampling=SamplingParams(**sampling))
    return request, list(engine.stream(request))


def test_pieces_carry_every_token_including_those_of_steps_without_text(engine: Any) -> None:
    _, deltas = _stream(engine, max_new_tokens=12, stop=(NEVER,))
    final = deltas[-1].final
    assert final is not None and final.finish_reason == "length" and len(final.token_ids) == 12
    assert [t for d in deltas for t in d.token_ids] == final.token_ids
    assert len(deltas) < 12  # some steps sent no text: their tokens went with a later piece
    assert deltas[-1].token_ids  # the last piece's own tokens (a token sent with no text before it ended)
    assert all(d.logprobs is None for d in deltas)  # not asked for


@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "sampled"])
def test_streamed_logprobs_are_the_rescored_reply_s(engine: Any, sampled: bool) -> None:
    # The generating forward passes (one new token each, its keys and values cached) and the scoring pass (the whole
    # sequence at once) round differently in float32: measured up to 1e-5 on the sampled token's log-prob and 1.7e-5
    # on an alternative's (32 tokens on an AVX2 CPU), where processed log-probs (temperature 2) differ by > 0.1.
    check_live_stream_logprobs(engine, RECORD, sampled=sampled, gap=5e-5)


def test_a_batch_scores_only_the_rows_that_ask(engine: Any) -> None:
    check_batch_streams_logprobs_only_where_asked(engine, RECORD)


@pytest.mark.parametrize("bad", [-1, 21, True, 1.5])
def test_logprobs_out_of_range_is_refused(bad: Any) -> None:
    with pytest.raises(InvalidRequestError, match="logprobs must be an integer"):
        SamplingParams(logprobs=bad)


def test_a_backend_that_streams_ids_only_gives_no_entries(engine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A backend whose ``_stream_many_ids`` yields ``(row, ids)`` (as every one did before): asked for log-probs,
    its pieces carry every token and ``logprobs`` None (the server then scores the whole reply)."""
    stream_many_ids = engine._stream_many_ids

    def ids_only(*args: Any, **kwargs: Any) -> Any:
        for row, ids, *_ in stream_many_ids(*args, **kwargs):
            yield row, ids

    monkeypatch.setattr(engine, "_stream_many_ids", ids_only)
    _, deltas = _stream(engine, max_new_tokens=8, logprobs=2)
    assert all(d.logprobs is None for d in deltas)
    assert [t for d in deltas for t in d.token_ids] == deltas[-1].final.token_ids
