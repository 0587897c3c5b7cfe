"""Asynchronous rollouts (``--async-rollouts``, ``--max-staleness K``): up to ``K`` generation rounds produced
ahead, with their rewards, on a worker thread while the policy trains, each at most ``K`` optimiser steps stale.

How a run uses it (:class:`~swiftcore_recipe_rl.trainer` ``EngineRollouts``):

1. The trainer's epoch iterator is wrapped in a :class:`Lookahead`, so the generation batches ``k + 1 .. k + K`` can
   be read while batch ``k`` is being trained on (the loop still receives every batch once, in order).
2. A round's staleness is ``t - w``: ``t`` the optimiser step it is trained at, ``w`` the step whose weights the
   engine held when it sampled it. The engine holds one set of weights and gets new ones only while the worker is
   idle (no round in flight), so ``w`` is known when a round is started: the step of the engine's last sync.
3. After round ``k``'s rollouts are taken at step ``s`` (:meth:`RolloutPrefetch.take`), the trainer syncs the engine
   to step ``s`` if the worker is idle, then starts the next rounds in order (:meth:`RolloutPrefetch.submit`), at
   most ``K`` rounds ahead of ``k``. Round ``k + d`` will be trained at step ``t = s + d * (optimiser steps per
   round)``; it is started only if ``t - w <= K`` (:meth:`RolloutPrefetch.allows`). A round that would be staler
   waits: it is started at a later step, once the worker has gone idle and the engine has been synced. Round
   ``k + 1`` is never left waiting: if it is not under way, nothing is, so the worker is idle and the engine is
   synced to ``s`` first.
4. Round ``k + 1`` takes the worker's result if its prompts are the round's and ``t - w <= K`` still holds (a guard:
   the schedule above keeps it; a round that fails it is dropped with the rounds after it, counted in
   :attr:`RolloutPrefetch.too_stale`, and generated again on current weights). The staleness is logged as
   ``rollout_staleness``; the importance-sampling correction (``--rollout-importance-sampling``) weighs each token by
   the current policy's probability over the sampling one, which the engine returns with each rollout.

``K = 1`` is one round ahead, synced before every round: every round after the first is 1 step stale. With ``K >= 2``
the worker runs up to ``K`` rounds back to back on one set of weights, so the engine is synced at most once per
``K`` rounds when generation is the slower part, and a slow round is absorbed by the rounds already generated.

Why a thread and not a process: the engine is the one the trainer already holds (colocated, or a client of a
``swiftcore rollout`` server); generation and the trainer's backward both release the GIL inside torch. Why weights
change only between rounds: an engine whose weights changed mid-generation would have sampled from no one policy,
and the rollout's log-probs (the correction's denominator) would be of neither.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
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


@dataclass
class _Round:
    future: Future
    prompt_ids: list[list[int]]
    weights_step: int
    item: int | None


class RolloutPrefetch:
    """Up to ``max_staleness`` generation rounds in flight on one worker thread (run in the order submitted), each
    tagged with its prompts and the optimiser step whose weights generate it.

    Args:
        max_staleness: ``K``, the most optimiser steps between a round's weights and the step it is trained at; also
            the most rounds in flight.

    Attributes:
        mismatches: rounds dropped because the trainer asked for other prompts.
        too_stale: times :meth:`take` found a round staler than ``K`` (and dropped it with the rounds after it).
    """

    def __init__(self, max_staleness: int = 1) -> None:
        if not (isinstance(max_staleness, int) and max_staleness >= 1):
            raise ValueError(f"max_staleness: {max_staleness!r} must be a whole number >= 1")
        self.max_staleness = max_staleness
        self._pool: ThreadPoolExecutor | None = None
        self._pending: deque[_Round] = deque()
        self.mismatches = 0
        self.too_stale = 0

    @property
    def busy(self) -> bool:
        """True while a round is in flight or waiting to be taken."""
        return bool(self._pending)

    @property
    def idle(self) -> bool:
        """True when no round is being generated (rounds done and waiting to be taken do not count): the engine's
        weights may change now."""
        return all(r.future.done() for r in self._pending)

    @property
    def pending(self) -> int:
        """Rounds submitted and not yet taken."""
        return len(self._pending)

    @property
    def last_item(self) -> int | None:
        """The ``item`` of the last round submitted and not yet taken (None: none pending)."""
        return self._pending[-1].item if self._pending else None

    def allows(self, train_step: int, weights_step: int) -> bool:
        """Whether a round sampled from the weights of step ``weights_step`` may be trained at ``train_step``."""
        return train_step - weights_step <= self.max_staleness

    def submit(
        self, generate: Callable[[], Any], prompt_ids: list[list[int]], weights_step: int, *, item: int | None = None
    ) -> None:
        """Start ``generate()`` (a round of rollouts of ``prompt_ids`` on the engine's current weights, those of
        optimiser step ``weights_step``) on the worker, after the rounds already pending.

        Args:
            generate: the round (called on the worker thread).
            prompt_ids: its prompts, which :meth:`take` checks.
            weights_step: the optimiser step whose weights the engine holds.
            item: the caller's index of the round (the trainer's batch index), returned by :attr:`last_item`.

        Raises:
            RuntimeError: ``max_staleness`` rounds are still pending (take one first).
        """
        if len(self._pending) >= self.max_staleness:
            raise RuntimeError(
                f"{len(self._pending)} prefetched rollout round(s) still pending, the most --max-staleness "
                f"{self.max_staleness} allows; take one before starting another"
            )
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="swiftcore-rollout")
        prompts = [[int(t) for t in p] for p in prompt_ids]
        self._pending.append(_Round(self._pool.submit(generate), prompts, int(weights_step), item))

    def take(self, prompt_ids: list[list[int]], train_step: int | None = None) -> tuple[Any, int] | None:
        """The oldest pending round's result and weights step if it generated ``prompt_ids`` (and, given
        ``train_step``, is at most ``max_staleness`` steps stale there); waits for the worker. None if nothing is
        pending, or the round is for other prompts or too stale: it is then dropped with every round after it (the
        worker is idle when this returns None), with a warning.

        Raises:
            Exception: whatever the round raised (an engine or server that failed mid-rollout).
        """
        if not self._pending:
            return None
        head = self._pending.popleft()
        result = head.future.result()
        if [[int(t) for t in p] for p in prompt_ids] != head.prompt_ids:
            self.mismatches += 1
            log.warning(
                "async rollouts: the round generated ahead was for other prompts than this round's (dropped with %d "
                "round(s) after it; this round is generated now)",
                len(self._pending),
            )
            self.drop()
            return None
        if train_step is not None and not self.allows(train_step, head.weights_step):
            self.too_stale += 1
            log.warning(
                "async rollouts: the round generated ahead on the weights of step %d would be trained at step %d, "
                "more than --max-staleness %d steps later (dropped with %d round(s) after it; generated again now)",
                head.weights_step,
                train_step,
                self.max_staleness,
                len(self._pending),
            )
            self.drop()
            return None
        return result, head.weights_step

    def wait(self) -> None:
        """Wait until the worker is idle (the pending rounds stay pending)."""
        wait([r.future for r in self._pending])

    def drop(self) -> None:
        """Wait for the rounds in flight and drop every pending round (a failure of one is only logged)."""
        pending, self._pending = list(self._pending), deque()
        for r in pending:
            try:
                r.future.result()
            except Exception as exc:  # nobody takes this round: its failure is only logged
                log.warning("async rollouts: a round generated ahead and dropped had failed (%s)", exc)

    def close(self) -> None:
        """Wait for the rounds in flight (their results are dropped) and stop the worker."""
        self.drop()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
