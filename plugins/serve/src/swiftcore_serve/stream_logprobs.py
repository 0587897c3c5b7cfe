"""A streamed reply with each piece's log-probabilities (chat ``logprobs``, completion ``logprobs`` with ``stream``).

The values are those a non-streamed request returns: the raw log-probs (vLLM's default), each generated token's and
its most likely alternatives. An engine that reports them as it generates (the transformers engine: each
:class:`~swiftcore_infer.StreamDelta` carries its tokens' :attr:`~swiftcore_infer.StreamDelta.logprobs` when the
request's ``sampling.logprobs`` asks) streams them live: each piece goes out as soon as it is generated, with the
entries of the tokens it carries, taken from the forward pass that generated them.

An engine that does not (its pieces' ``logprobs`` stay None, e.g. SGLang, or vLLM with processed log-probs) has the
whole reply scored once, after it is generated, by :meth:`~swiftcore_infer.Engine.completion_logprobs` on the engine's
thread. That thread is generating the stream until then (and vLLM cannot score while it streams), so the pieces of a
request are held until its reply is complete, and follow once scored, each with the entries of the tokens it carries
(:func:`~swiftcore_serve.replies.token_spans`). Either way the first ``None`` marks the request as accepted (the route
sends its first chunk then, so a bad request is still a 4xx).
"""

from __future__ import annotations

import dataclasses
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
        empty without ``top``). Each piece comes as soon as it is generated, unless ``top`` is set and the engine
        does not report log-probs while it streams (then they come once the reply is scored).
    """
    if top is None:
        first = True
        async for delta in state.worker.stream(request):
            if first:
                first = False
                yield None
            yield delta, [], []
        return
    # Ask the engine for each token's entries as it generates them; one that cannot leaves the pieces' logprobs None.
    request.sampling = dataclasses.replace(request.sampling, logprobs=top)
    deltas: list[StreamDelta] = []
    live = False
    async for delta in state.worker.stream(request):
        if not deltas and not live:
            yield None
            live = delta.logprobs is not None
        if live:  # the engine's own values, from the forward pass that generated the tokens: sent at once
            yield delta, list(delta.token_ids), list(delta.logprobs or ())
        else:
            deltas.append(delta)
    if live:
        return
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
