"""Pack encoded samples into bins of at most ``max_length`` tokens (offline packing for text models)."""

from __future__ import annotations

import bisect
import random
from collections.abc import Mapping, Sequence
from typing import Any

from swiftcore_data.errors import DataError

__all__ = ["pack_samples"]

Sample = Mapping[str, Any]


def pack_samples(samples: Sequence[Sample], max_length: int, seed: int = 0) -> list[list[Sample]]:
    """Group samples into bins whose total ``len(input_ids)`` is at most ``max_length``.

    Best-fit decreasing: samples are taken longest first (ties in a seeded random order) and each goes
    into the fullest bin it still fits in, or a new bin. This greedy rule uses at most 11/9 of the
    optimal number of bins plus one. The bins are then shuffled by ``seed`` so training does not see
    them sorted by fill. Feed a bin (a list of samples) to :class:`PaddingFreeCollator`, which flattens it
    into one row with per-sample ``position_ids``.

    Args:
        samples: encoded samples, dicts with ``"input_ids"`` (and ``"labels"``).
        max_length: the packing length (tokens per bin).
        seed: orders ties and the bins; the same seed gives the same bins.

    Returns:
        The bins, each a non-empty list of the original sample objects.

    Raises:
        DataError: ``max_length`` is not positive, or a sample is empty or longer than ``max_length``.
    """
    if max_length <= 0:
        raise DataError("--packing-length", None, f"must be a positive number of tokens, got {max_length!r}")
    lengths = []
    for i, sample in enumerate(samples):
        n = len(sample["input_ids"])
        if not 0 < n <= max_length:
            where = str(sample.get("_source", f"sample {i}"))
            problem = "empty sample" if n == 0 else f"{n} tokens do not fit the packing length {max_length}"
            raise DataError(
                where,
                "input_ids",
                f"{problem}; truncate samples at encode time (max_length) or raise the packing length",
                reason="sample does not fit",
            )
        lengths.append(n)
    rng = random.Random(f"swiftcore_data:{seed}:pack")
    order = list(range(len(samples)))
    rng.shuffle(order)  # a seeded tie order; the stable sort below keeps it among equal lengths
    order.sort(key=lambda i: -lengths[i])
    bins: list[list[Sample]] = []
    # (room left, bin index), sorted: bisect finds the bin with the least room that still fits.
    room: list[tuple[int, int]] = []
    for i in order:
        n = lengths[i]
        slot = bisect.bisect_left(room, (n, -1))
        if slot == len(room):
            bins.append([samples[i]])
            bisect.insort(room, (max_length - n, len(bins) - 1))
        else:
            left, b = room.pop(slot)
            bins[b].append(samples[i])
            bisect.insort(room, (left - n, b))
    rng.shuffle(bins)
    return bins
