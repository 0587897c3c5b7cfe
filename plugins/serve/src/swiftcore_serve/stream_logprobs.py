"""A streamed reply with each piece's log-probabilities (chat ``logprobs``, completion ``logprobs`` with ``stream``).

The values are those a non-streamed request returns: the whole reply scored once, after it is generated, by the
engine's :meth:`~swiftcore_infer.Engine.completion_logprobs` (the raw log-probs, vLLM's default), on the engine's
thread. That thread is generating the stream until then (and a backend such as vLLM cannot score while it streams),
so the pieces of a request that asks for log-probs are held until its reply is complete: the first ``None`` marks
the request as accepted (the route sends its first chunk then, so a bad request is still a 4xx), and the pieces
follow once scored, each with the entries of the tokens it carries (:func:`~swiftcore_serve.replies.token_spans`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from swiftcore_infer import Request, StreamDelta

from swiftcore_serve import replies

if TYPE_CHECKING:
    from swiftcore_serve.state import ServeState

__all__ = ["stream_with_logprobs"]


async def stream_with_logprobs(
    state: ServeState, request: Request, top: int | None
) -> AsyncIterator[tuple[StreamDelta, list[int], list[Any]] | None]:
    """Stream ``request``; with ``top`` (alternatives per token) each piece comes with its tokens' ids and entries.

    Yields:
        ``None`` once the request is accepted (its first piece generated), then ``(delta, ids, entries)`` per
        piece: ``ids`` the tokens it carries and ``entries`` their :class:`~swiftcore_infer.TokenLogprob` (both
        empty without ``top``, where each piece comes as soon as it is generated).
    """
    if top is None:
        first = True
        async for delta in state.worker.stream(request):
            if first:
                first = False
                yield None
            yield delta, [], []
        return
    deltas: list[StreamDelta] = []
    async for delta in state.worker.stream(request):
        if not deltas:
            yield None
        deltas.append(delta)
    final = deltas[-1].final if deltas else None
    if final is None:  # the stream ended early (the worker stopped): send what came
        for delta in deltas:
            yield delta, [], []
        return
    engine = state.engine
    tokens = list(final.token_ids)

    def score() -> tuple[list[Any], list[range]]:  # on the engine's thread, as the non-streamed reply's scores
        _, entries = engine.completion_logprobs(request, tokens, top_logprobs=top)
        texts = [d.text for d in deltas]
        return entries, replies.token_spans(engine.decode, tokens, texts, request.sampling.stop)

    entries, spans = await state.worker.call(score)
    for delta, span in zip(deltas, spans, strict=True):
        yield delta, tokens[span.start : span.stop], entries[span.start : span.stop]
