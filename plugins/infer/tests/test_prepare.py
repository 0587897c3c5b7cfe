"""Encoding runs ahead of the engine, in order, and a failure stays in its own slot."""

from __future__ import annotations

import threading

import pytest
from swiftcore_infer.prepare import prepare_ahead


def test_batches_in_order_with_errors_in_their_slots() -> None:
    def encode(x: int) -> int:
        if x % 4 == 3:
            raise ValueError(f"bad {x}")
        return x * 10

    batches = list(prepare_ahead(list(range(10)), encode, batch_size=4))
    assert [len(b) for b in batches] == [4, 4, 2]
    flat = [item for b in batches for item in b]
    assert [i for i, _ in flat] == list(range(10))
    for i, value in flat:
        if i % 4 == 3:
            assert isinstance(value, ValueError) and str(value) == f"bad {i}"
        else:
            assert value == i * 10


def test_next_batch_is_encoded_while_the_consumer_works() -> None:
    encoded_second = threading.Event()

    def encode(x: int) -> int:
        if x == 2:
            encoded_second.set()
        return x

    iterator = prepare_ahead([0, 1, 2, 3], encode, batch_size=2)
    next(iterator)
    # The consumer holds batch one; batch two gets encoded meanwhile, without being asked for.
    assert encoded_second.wait(5)
    assert [i for i, _ in next(iterator)] == [2, 3]


def test_bad_batch_size() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        list(prepare_ahead([1], lambda x: x, batch_size=0))


def test_empty_input_yields_nothing() -> None:
    assert list(prepare_ahead([], lambda x: x, batch_size=3)) == []
