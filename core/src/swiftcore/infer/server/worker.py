"""One thread owns the engine; the server hands it jobs through a bounded queue.

Engines (a transformers model, vLLM's ``LLM``) are not safe to call from many threads, and the event
loop must never block on a forward pass. So the HTTP handlers put jobs on a bounded queue (full -> the
server answers 429) and await their results; the worker thread takes jobs in order and batches the
non-streaming generation requests that are waiting together into one engine call.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from swiftcore.infer.errors import InferError
from swiftcore.infer.types import Generation, Request, StreamDelta

__all__ = ["EngineWorker", "QueueFullError"]

logger = logging.getLogger("swiftcore.infer.server")


class QueueFullError(InferError):
    """The request queue is full; the client should retry later."""

    status = 429


@dataclass
class _Generate:
    request: Request
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop


@dataclass
class _Stream:
    request: Request
    items: asyncio.Queue
    loop: asyncio.AbstractEventLoop
    cancelled: threading.Event = field(default_factory=threading.Event)


@dataclass
class _Call:
    fn: Callable[[], Any]
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop


_STOP = object()
#: Marks the end of a stream on its asyncio queue.
_END = object()


def _resolve(
    loop: asyncio.AbstractEventLoop, future: asyncio.Future, value: Any = None, error: BaseException | None = None
) -> None:
    def apply() -> None:
        if future.done():  # the client went away
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    loop.call_soon_threadsafe(apply)


class EngineWorker:
    """Runs engine calls on one thread, fed by a bounded queue.

    Args:
        engine: the :class:`~swiftcore.infer.engine.Engine`.
        max_queue: jobs that may wait; one more is refused with :class:`QueueFullError`.
        max_batch: the most waiting generation requests served by one engine call.
    """

    def __init__(self, engine: Any, *, max_queue: int = 64, max_batch: int = 16) -> None:
        self.engine = engine
        self.max_batch = max_batch
        self._jobs: queue.Queue[Any] = queue.Queue(maxsize=max_queue)
        self._held: Any = None
        self._thread = threading.Thread(target=self._run, name="swiftcore-engine", daemon=True)
        self._thread.start()

    @property
    def queued(self) -> int:
        """Jobs waiting for the engine (the one it is running not included)."""
        return self._jobs.qsize()

    # ------------------------------------------------------------------ submitting (event loop side)

    def _put(self, job: Any) -> None:
        try:
            self._jobs.put_nowait(job)
        except queue.Full:
            raise QueueFullError(
                f"the server's queue is full ({self._jobs.maxsize} requests waiting); retry later"
            ) from None

    async def generate(self, request: Request) -> Generation:
        """Generate one reply (batched with other waiting requests)."""
        loop = asyncio.get_running_loop()
        job = _Generate(request, loop.create_future(), loop)
        self._put(job)
        return await job.future

    async def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn()`` on the engine thread (embeddings, weight updates, adapter loading)."""
        loop = asyncio.get_running_loop()
        job = _Call(fn, loop.create_future(), loop)
        self._put(job)
        return await job.future

    async def stream(self, request: Request) -> AsyncIterator[StreamDelta]:
        """Stream one reply.

        The first ``await`` of the iterator raises the request's error (invalid request, full queue)
        before anything is sent, so the server can still answer with a 4xx.
        """
        loop = asyncio.get_running_loop()
        job = _Stream(request, asyncio.Queue(), loop)
        self._put(job)
        try:
            while True:
                item = await job.items.get()
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            job.cancelled.set()  # the client went away, or the stream ended: stop generating

    # ------------------------------------------------------------------ the engine thread

    def _next(self) -> Any:
        if self._held is not None:
            job, self._held = self._held, None
            return job
        return self._jobs.get()

    def _run(self) -> None:
        while True:
            job = self._next()
            if job is _STOP:
                return
            try:
                if isinstance(job, _Generate):
                    self._run_generate(job)
                elif isinstance(job, _Stream):
                    self._run_stream(job)
                else:
                    self._run_call(job)
            except BaseException as exc:  # never let one job kill the worker
                logger.exception("engine job failed: %s", exc)

    def _run_generate(self, first: _Generate) -> None:
        batch = [first]
        while len(batch) < self.max_batch:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if not isinstance(job, _Generate):
                self._held = job
                break
            batch.append(job)
        try:
            results = self.engine.generate_requests([j.request for j in batch], batch_size=len(batch))
        except BaseException as exc:
            for job in batch:
                _resolve(job.loop, job.future, error=exc)
            return
        for job, result in zip(batch, results, strict=True):
            _resolve(job.loop, job.future, result)

    def _run_stream(self, first: _Stream) -> None:
        # Streams waiting together are generated together (one batch), each fed to its own client.
        batch = [first]
        while len(batch) < self.max_batch:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if not isinstance(job, _Stream):
                self._held = job
                break
            batch.append(job)
        live = [job for job in batch if not job.cancelled.is_set()]
        if not live:
            return

        def send(job: _Stream, item: Any) -> None:
            job.loop.call_soon_threadsafe(job.items.put_nowait, item)

        try:
            pieces = self.engine.stream_many([job.request for job in live])
            try:
                for index, piece in pieces:
                    send(live[index], piece)
                    if all(job.cancelled.is_set() for job in live):
                        break  # every client went away: stop generating
            finally:
                pieces.close()
        except BaseException as exc:
            for job in live:
                send(job, exc)
        for job in live:
            send(job, _END)

    def _run_call(self, job: _Call) -> None:
        try:
            value = job.fn()
        except BaseException as exc:
            _resolve(job.loop, job.future, error=exc)
            return
        _resolve(job.loop, job.future, value)

    def close(self, timeout: float = 30.0) -> None:
        """Finish the queued jobs and stop the thread."""
        self._jobs.put(_STOP)
        self._thread.join(timeout)
