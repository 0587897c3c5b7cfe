"""Preprocessing that runs ahead of the engine: template encoding of the next batch overlaps generation.

The engine thread is busy with batch *k* while a worker thread encodes batch *k+1* (tokenizers release
the GIL), and a request that cannot be encoded becomes an error value in its slot, never an exception
that takes its batch down.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["Prepared", "prepare_ahead"]

T = TypeVar("T")

#: One prepared request: its position in the input and the encoded prompt, or the error encoding raised.
Prepared = tuple[int, Any]


def _encode_batch(items: Sequence[tuple[int, T]], encode: Callable[[T], Any]) -> list[Prepared]:
    out: list[Prepared] = []
    for index, item in items:
        try:
            out.append((index, encode(item)))
        except Exception as exc:
            out.append((index, exc))
    return out


def prepare_ahead(
    items: Sequence[T], encode: Callable[[T], Any], batch_size: int, *, ahead: int = 2
) -> Iterator[list[Prepared]]:
    """Yield batches of ``(index, encoded or exception)``, encoding up to ``ahead`` batches in advance.

    Args:
        items: the requests, in order.
        encode: turns one request into its encoded prompt; any exception it raises is returned in
            that request's slot.
        batch_size: requests per yielded batch (>= 1).
        ahead: how many batches may be encoded before the consumer asks for them.

    Yields:
        Lists of ``(index in items, encoded prompt or exception)``.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    batches = [list(enumerate(items))[start : start + batch_size] for start in range(0, len(items), batch_size)]
    if not batches:
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="swiftcore-prepare") as pool:
        pending: list[Future[list[Prepared]]] = []
        next_batch = 0
        while next_batch < len(batches) and len(pending) < ahead:
            pending.append(pool.submit(_encode_batch, batches[next_batch], encode))
            next_batch += 1
        while pending:
            done = pending.pop(0).result()
            if next_batch < len(batches):
                pending.append(pool.submit(_encode_batch, batches[next_batch], encode))
                next_batch += 1
            yield done
