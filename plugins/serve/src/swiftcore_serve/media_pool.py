"""Requests with images or audio are encoded in a pool of threads before they queue for the engine.

Decoding a picture or a clip and running the model's processor on it (resizing, patches, audio features) is
the slow part of encoding a multimodal request. Done on the engine's thread (:mod:`swiftcore_serve.worker`),
it would hold up every request queued behind it, text ones too; done on the event loop, it would stall the
whole server. So the handlers hand such requests to this pool first: each of its threads encodes with its own
copy of the tokenizer and processor (:meth:`~swiftcore_infer.engine.Engine.encoding_tools`), the prompt is
kept in ``request.encoded``, and the engine thread only runs the model. Text requests skip the pool: their
template encoding is cheap and stays on the engine thread (:func:`~swiftcore_infer.prepare.prepare_ahead`).

A bad item fails here, before the request queues, with the same 400 the engine would have given it.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from swiftcore_infer import Request

from swiftcore_serve.worker import QueueFullError, ShuttingDownError

__all__ = ["MediaEncodePool"]


class MediaEncodePool:
    """Encodes multimodal requests on ``workers`` threads, at most ``max_waiting`` of them at a time.

    Args:
        engine: the :class:`~swiftcore_infer.engine.Engine` whose :meth:`encode` runs here.
        workers: threads (each builds its tokenizer and processor copies on its first request).
        max_waiting: requests encoding or waiting to; more are refused with :class:`QueueFullError`, so a
            burst of large uploads cannot pile up decoded pixels without bound.
    """

    def __init__(self, engine: Any, *, workers: int = 2, max_waiting: int = 64) -> None:
        if workers < 1 or max_waiting < 1:
            raise ValueError(f"workers and max_waiting must be >= 1, got {workers} and {max_waiting}")
        self.engine = engine
        self.workers = workers
        self.max_waiting = max_waiting
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="swiftcore-media")
        # Tool sets not in use: a thread takes one for a request and puts it back, so at most `workers` exist.
        self._idle: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._waiting = 0
        self._lock = threading.Lock()
        self._closed = False

    async def encode(self, request: Request) -> None:
        """Encode ``request`` on the pool (its prompt lands in ``request.encoded``).

        Raises:
            QueueFullError: ``max_waiting`` requests are in the pool already.
            ShuttingDownError: the pool is closed.
            InvalidRequestError: the request cannot be encoded (bad media, a type the model does not take ...).
        """
        with self._lock:
            if self._closed:
                raise ShuttingDownError("the server is shutting down")
            if self._waiting >= self.max_waiting:
                raise QueueFullError(f"the server is decoding {self.max_waiting} media requests already; retry later")
            self._waiting += 1
        try:
            await asyncio.get_running_loop().run_in_executor(self._pool, self._encode, request)
        finally:
            with self._lock:
                self._waiting -= 1

    def _encode(self, request: Request) -> None:
        try:
            tools = self._idle.get_nowait()
        except queue.Empty:
            tools = self.engine.encoding_tools()
        try:
            self.engine.encode(request, tools=tools)
        finally:
            self._idle.put(tools)

    def close(self) -> None:
        """Refuse new requests and let the ones encoding finish."""
        with self._lock:
            self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)
