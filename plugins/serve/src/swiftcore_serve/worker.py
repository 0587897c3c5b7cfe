"""One thread owns the engine; the server hands it jobs through a bounded queue.

Engines (a transformers model, vLLM's ``LLM``) are not safe to call from many threads, and the event
loop must never block on a forward pass. So the HTTP handlers put jobs on a bounded queue (full -> the
server answers 429) and await their results; the worker thread takes jobs in order and batches the
generation requests that are waiting together into one engine call.

Requests with images or audio and text-only requests never share an engine call, and when a call has served
media, a waiting text request goes next, before older media requests: a text reply then waits for at most the
call in progress instead of sharing a batch with (and the cost of) the prefill of hundreds of image tokens. The
call after that takes the queue in order again, so media requests are never starved by a stream of text.

Every job can be abandoned: when its client goes away the handler's await is cancelled, the job leaves the
queue at once (its slot is free for the next request), and a job the engine is already running stops at
its next token. That is why generation, streamed or not, runs through :meth:`Engine.stream_many` wherever
the backend batches streams (transformers, vLLM): closing that iterator stops the backend, whereas a
``generate_requests`` call runs to its last token. Backends that stream one request at a time keep
``generate_requests`` for non-streamed requests (batching matters more there); those are dropped if their
client leaves while they wait, but run to the end once started.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from swiftcore_infer import Generation, InferError, Request, StreamDelta

__all__ = ["EngineWorker", "QueueFullError", "ShuttingDownError"]

logger = logging.getLogger("swiftcore_serve")


class QueueFullError(InferError):
    """The request queue is full; the client should retry later (the answer carries ``Retry-After``)."""

    status = 429


class ShuttingDownError(InferError):
    """The server is stopping and takes no more work."""

    status = 503


@dataclass(eq=False)
class _Job:
    loop: asyncio.AbstractEventLoop
    cancelled: threading.Event = field(default_factory=threading.Event, init=False)
    #: Set on the engine thread once the job has its outcome (a result or an error).
    finished: bool = field(default=False, init=False)


@dataclass(eq=False)
class _Generate(_Job):
    """A non-streamed generation: only the final :class:`Generation` (or the error) goes back."""

    request: Request = field(kw_only=True)
    future: asyncio.Future = field(kw_only=True)

    def deliver(self, piece: StreamDelta | BaseException) -> None:
        if isinstance(piece, BaseException):
            self.fail(piece)
        elif piece.final is not None and not self.finished:
            self.finished = True
            _resolve(self.loop, self.future, piece.final)

    def fail(self, error: BaseException) -> None:
        if not self.finished:
            self.finished = True
            _resolve(self.loop, self.future, error=error)

    def end(self) -> None:
        # Only a cancelled job (nobody waits) or a backend that stopped early gets here unfinished.
        self.fail(InferError("the engine stopped before this request finished"))


@dataclass(eq=False)
class _Stream(_Job):
    """A streamed generation: every piece goes back, then :data:`_END`."""

    request: Request = field(kw_only=True)
    items: asyncio.Queue = field(kw_only=True)
    #: Whether any piece went out (then a failed batch cannot retry it without repeating text).
    sent: bool = field(default=False, init=False)

    def _put(self, item: Any) -> None:
        self.loop.call_soon_threadsafe(self.items.put_nowait, item)

    def deliver(self, piece: StreamDelta | BaseException) -> None:
        if self.finished:
            return
        self.sent = True
        self._put(piece)
        if isinstance(piece, BaseException) or piece.final is not None:
            self.finished = True

    def fail(self, error: BaseException) -> None:
        if not self.finished:
            self.finished = True
            self._put(error)

    def end(self) -> None:
        self.finished = True
        self._put(_END)


@dataclass(eq=False)
class _Call(_Job):
    fn: Callable[[], Any] = field(kw_only=True)
    future: asyncio.Future = field(kw_only=True)


#: Marks the end of a stream on its asyncio queue.
_END = object()


def _has_media(job: _Job) -> bool:
    """Whether ``job`` generates from a prompt with images or audio (encoded already, or still in its record)."""
    from swiftcore_infer import Prompt, media_kinds

    request = getattr(job, "request", None)
    if request is None:
        return False
    if request.encoded is not None:
        return isinstance(request.encoded, Prompt)
    return bool(request.record is not None and media_kinds(request.record))


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

    try:
        loop.call_soon_threadsafe(apply)
    except RuntimeError:  # the event loop is closed: the server has stopped, nobody is waiting
        pass


def _streams_in_batches(engine: Any) -> bool:
    """Whether ``engine`` streams several requests as one batch (so streaming loses no throughput)."""
    if "stream" not in getattr(engine, "capabilities", ()):
        return False
    from swiftcore_infer import Engine

    own = getattr(type(engine), "_stream_many_ids", None)
    # The base class streams requests one after the other; transformers and vLLM override it to batch.
    return own is not None and own is not Engine._stream_many_ids


class EngineWorker:
    """Runs engine calls on one thread, fed by a bounded queue.

    Args:
        engine: the :class:`~swiftcore_infer.engine.Engine`.
        max_queue: jobs that may wait; more are refused with :class:`QueueFullError`.
        max_batch: the most waiting generation requests served by one engine call.
    """

    def __init__(self, engine: Any, *, max_queue: int = 64, max_batch: int = 16) -> None:
        if max_queue < 1 or max_batch < 1:
            raise ValueError(f"max_queue and max_batch must be >= 1, got {max_queue} and {max_batch}")
        self.engine = engine
        self.max_queue = max_queue
        self.max_batch = max_batch
        self._jobs: deque[_Job] = deque()
        self._ready = threading.Condition()
        self._closed = False
        self._stream_batches = _streams_in_batches(engine)
        #: Whether the last engine call served media (then a waiting text request goes first).
        self._served_media = False
        self._thread = threading.Thread(target=self._run, name="swiftcore-engine", daemon=True)
        self._thread.start()

    @property
    def queued(self) -> int:
        """Jobs waiting for the engine (the ones it is running not included)."""
        with self._ready:
            return len(self._jobs)

    # ------------------------------------------------------------------ submitting (event loop side)

    def _put(self, jobs: Sequence[_Job]) -> None:
        """Queue ``jobs`` all together, or none of them."""
        with self._ready:
            if self._closed:
                raise ShuttingDownError("the server is shutting down")
            if len(self._jobs) + len(jobs) > self.max_queue:
                raise QueueFullError(f"the server's queue is full ({self.max_queue} requests waiting); retry later")
            self._jobs.extend(jobs)
            self._ready.notify()

    def _forget(self, job: _Job) -> None:
        """Abandon ``job``: out of the queue if it still waits there, stopped at its next token if it runs."""
        job.cancelled.set()
        with self._ready:
            try:
                self._jobs.remove(job)
            except ValueError:  # already taken by the engine thread
                pass

    async def generate(self, request: Request) -> Generation:
        """Generate one reply (batched with other waiting requests)."""
        return (await self.generate_many([request]))[0]

    async def generate_many(self, requests: Sequence[Request]) -> list[Generation]:
        """Generate replies to several requests, queued together (all or none: a full queue refuses them all).

        Cancelling the await (the client went away) abandons every one of them.

        Raises:
            QueueFullError: the queue has no room for all of them.
            InferError: a request failed (the others are abandoned).
        """
        loop = asyncio.get_running_loop()
        jobs = [_Generate(loop, request=r, future=loop.create_future()) for r in requests]
        self._put(jobs)
        try:
            return list(await asyncio.gather(*(job.future for job in jobs)))
        finally:
            for job in jobs:
                if not job.finished:
                    self._forget(job)

    async def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn()`` on the engine thread (embeddings, weight updates, adapter loading)."""
        loop = asyncio.get_running_loop()
        job = _Call(loop, fn=fn, future=loop.create_future())
        self._put([job])
        try:
            return await job.future
        finally:
            if not job.future.done():
                self._forget(job)

    async def stream(self, request: Request) -> AsyncIterator[StreamDelta]:
        """Stream one reply.

        The first ``await`` of the iterator raises the request's error (invalid request, full queue)
        before anything is sent, so the server can still answer with a 4xx.
        """
        loop = asyncio.get_running_loop()
        job = _Stream(loop, request=request, items=asyncio.Queue())
        self._put([job])
        try:
            while True:
                item = await job.items.get()
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            self._forget(job)  # the client went away, or the stream ended: stop generating

    # ------------------------------------------------------------------ the engine thread

    def _take(self) -> _Job | None:
        """The next job (None once closed and drained): the oldest, or right after a call that served media,
        the oldest text generation."""
        with self._ready:
            while not self._jobs:
                if self._closed:
                    return None
                self._ready.wait()
            if self._served_media:
                self._served_media = False  # the next call takes the queue in order again
                for index, job in enumerate(self._jobs):
                    if isinstance(job, (_Generate, _Stream)) and not _has_media(job):
                        del self._jobs[index]
                        return job
            return self._jobs.popleft()

    def _batch_with(self, first: _Generate | _Stream) -> list[_Job]:
        """``first`` and the generation jobs right behind it that can share its engine call (media and text
        requests apart)."""
        batch: list[_Job] = [first]
        media = _has_media(first)
        with self._ready:
            while self._jobs and len(batch) < self.max_batch:
                job = self._jobs[0]
                same_call = isinstance(job, type(first)) or (
                    self._stream_batches and isinstance(job, (_Generate, _Stream))
                )
                if not same_call or _has_media(job) != media:
                    break
                batch.append(self._jobs.popleft())
        return batch

    def _run(self) -> None:
        while True:
            job = self._take()
            if job is None:
                return
            try:
                if isinstance(job, _Call):
                    self._run_call(job)
                elif isinstance(job, (_Generate, _Stream)):
                    batch = [j for j in self._batch_with(job) if not j.cancelled.is_set()]
                    self._served_media = any(_has_media(j) for j in batch)
                    if batch and isinstance(batch[0], _Generate) and not self._stream_batches:
                        self._generate_at_once(batch)
                    elif batch:
                        self._stream_together(batch)
            except BaseException as exc:  # never let one job kill the worker
                logger.exception("engine job failed: %s", exc)

    def _generate_at_once(self, batch: list[Any]) -> None:
        """Non-streamed requests on a backend that streams one at a time: one ``generate_requests`` call."""
        try:
            results = self.engine.generate_requests([j.request for j in batch], batch_size=len(batch))
        except BaseException as exc:
            for job in batch:
                job.fail(exc)
            return
        for job, result in zip(batch, results, strict=True):
            job.finished = True
            _resolve(job.loop, job.future, result)

    def _stream_together(self, batch: list[Any]) -> None:
        """Generate ``batch`` as one streamed engine call, each job fed what it asked for.

        Stops early when every client went away. When the engine call fails for a batch of several, the
        jobs that have sent nothing yet are retried one by one, so one bad request fails alone.
        """
        try:
            pieces = self.engine.stream_many([job.request for job in batch])
            try:
                for index, piece in pieces:
                    batch[index].deliver(piece)
                    if all(job.cancelled.is_set() or job.finished for job in batch):
                        break  # every client went away (or every reply is complete): stop generating
            finally:
                close = getattr(pieces, "close", None)
                if callable(close):
                    close()
        except Exception as exc:
            if len(batch) == 1:
                batch[0].fail(exc)
                batch[0].end()
                return
            logger.warning("a batch of %d failed (%s); retrying its requests one by one", len(batch), exc)
            for job in batch:
                if job.finished or job.cancelled.is_set():
                    job.end()
                elif isinstance(job, _Stream) and job.sent:
                    job.fail(exc)
                    job.end()
                else:
                    self._stream_together([job])
            return
        for job in batch:
            job.end()

    def _run_call(self, job: _Call) -> None:
        if job.cancelled.is_set():
            return
        try:
            value = job.fn()
        except BaseException as exc:
            _resolve(job.loop, job.future, error=exc)
            return
        _resolve(job.loop, job.future, value)

    def close(self, timeout: float = 30.0) -> None:
        """Finish the queued jobs and stop the thread."""
        with self._ready:
            self._closed = True
            self._ready.notify_all()
        self._thread.join(timeout)
