"""Asynchronous rollouts (``--async-rollouts``): the next generation round's prompts seen ahead, and that round's
rollouts (and rewards) produced on a worker thread while the policy trains on this round's.

How a run uses it (:class:`~swiftcore_recipe_rl.trainer` ``EngineRollouts``):

1. The trainer's epoch iterator is wrapped in a :class:`Lookahead`, so the generation batch ``k + 1`` can be read
   while batch ``k`` is being trained on (the loop still receives every batch once, in order).
2. After round ``k``'s rollouts are taken, the engine gets the policy's current weights and :class:`RolloutPrefetch`
   starts round ``k + 1`` on its worker. The worker is idle whenever weights are pushed (the sync happens right after
   the previous round was taken), so an engine never changes weights mid-generation.
3. Round ``k + 1`` takes the worker's result if its prompts are the round's (else it generates them as usual). Its
   rollouts were sampled from the weights of the step they were started at: at most one generation round stale, the
   staleness logged as ``rollout_staleness`` (optimiser steps). The importance-sampling correction
   (``--rollout-importance-sampling``) weighs each token by the current policy's probability over the sampling one.

Why a thread and not a process: the engine is the one the trainer already holds (colocated, or a client of a
``swiftcore rollout`` server); generation and the trainer's backward both release the GIL inside torch. Why one
round ahead and not more: a round started ``n`` rounds early is ``n`` steps stale, and every further round would
have to wait for the weights anyway (the engine holds one set).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

__all__ = ["Lookahead", "RolloutPrefetch"]

log = logging.getLogger("swiftcore.rl")


class Lookahead:
    """An iterator that hands on ``source``'s items in order and lets its owner read items ahead of the loop.

    Items are numbered from 0 in the order ``source`` yields them; :meth:`peek` reads item ``index`` whether it
    was already handed on (the last ``keep`` are kept) or still to come (read from ``source`` and held until handed).

    Args:
        source: the iterator to wrap (the trainer's epoch iterator).
        keep: how many handed-on items :meth:`peek` can still read.
    """

    def __init__(self, source: Iterator[Any], *, keep: int = 64) -> None:
        self.source = source
        self.handed = 0
        self._ahead: deque[Any] = deque()
        self._behind: deque[tuple[int, Any]] = deque(maxlen=keep)
        self._exhausted = False

    def __iter__(self) -> Lookahead:
        return self

    def __next__(self) -> Any:
        if self._ahead:
            item = self._ahead.popleft()
        else:
            item = next(self.source)
        self._behind.append((self.handed, item))
        self.handed += 1
        return item

    def peek(self, index: int) -> Any:
        """Item ``index``, or None when ``source`` ends before it (or it was handed on too long ago)."""
        if index < self.handed:
            return next((item for i, item in self._behind if i == index), None)
        while len(self._ahead) <= index - self.handed:
            if self._exhausted:
                return None
            try:
                self._ahead.append(next(self.source))
            except StopIteration:
                self._exhausted = True
                return None
        return self._ahead[index - self.handed]


class RolloutPrefetch:
    """At most one generation round in flight on a worker thread, tagged with its prompts and the optimiser step
    whose weights generate it."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._pending: tuple[Future, list[list[int]], int] | None = None
        self.mismatches = 0

    @property
    def busy(self) -> bool:
        """True while a round is in flight or waiting to be taken."""
        return self._pending is not None

    def submit(self, generate: Callable[[], Any], prompt_ids: list[list[int]], weights_step: int) -> None:
        """Start ``generate()`` (a round of rollouts of ``prompt_ids`` on the engine's current weights, those of
        optimiser step ``weights_step``) on the worker.

        Raises:
            RuntimeError: a round is still pending (take it first: the engine's weights must not change under it).
        """
        if self._pending is not None:
            raise RuntimeError("a prefetched rollout round is still pending; take it before starting another")
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="swiftcore-rollout")
        self._pending = (self._pool.submit(generate), [list(p) for p in prompt_ids], weights_step)

    def take(self, prompt_ids: list[list[int]]) -> tuple[Any, int] | None:
        """The pending round's result and weights step if it generated ``prompt_ids``; None if nothing is pending or
        it generated other prompts (the round is then dropped, with a warning). Waits for the worker.

        Raises:
            Exception: whatever the round raised (an engine or server that failed mid-rollout).
        """
        if self._pending is None:
            return None
        future, expected, step = self._pending
        self._pending = None
        result = future.result()
        if [[int(t) for t in p] for p in prompt_ids] != expected:
            self.mismatches += 1
            log.warning(
                "async rollouts: the round generated ahead was for other prompts than this round's (dropped; this "
                "round is generated now)"
            )
            return None
        return result, step

    def close(self) -> None:
        """Wait for a round in flight (its result is dropped) and stop the worker."""
        pending, self._pending = self._pending, None
        if pending is not None:
            try:
                pending[0].result()
            except Exception as exc:  # the run is ending; a failure of a round nobody takes is only logged
                log.warning("async rollouts: the round generated ahead failed after the run ended (%s)", exc)
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
