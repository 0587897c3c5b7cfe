"""pack_samples: bins never overflow, every sample is packed once, and the result is seeded."""

from __future__ import annotations

import random

import pytest
from swiftcore_data import DataError, pack_samples


def sample(n: int, tag: int) -> dict:
    return {"input_ids": [tag] * n, "labels": [tag] * n, "tag": tag}


def test_bins_fit_and_cover_every_sample_once() -> None:
    rng = random.Random(0)
    samples = [sample(rng.randint(1, 100), i) for i in range(300)]
    bins = pack_samples(samples, max_length=128, seed=0)
    assert all(sum(len(s["input_ids"]) for s in b) <= 128 for b in bins)
    assert sorted(s["tag"] for b in bins for s in b) == list(range(300))
    total = sum(len(s["input_ids"]) for s in samples)
    lower_bound = -(-total // 128)
    assert len(bins) <= lower_bound * 11 / 9 + 1  # the best-fit-decreasing guarantee
    assert all(s is samples[s["tag"]] for b in bins for s in b)  # the original objects, not copies


def test_perfect_fit_is_found() -> None:
    # 6+4, 7+3, 5+5: greedy best-fit decreasing packs these into exactly 3 full bins of 10.
    samples = [sample(n, i) for i, n in enumerate([3, 5, 6, 4, 7, 5])]
    bins = pack_samples(samples, max_length=10)
    assert len(bins) == 3
    assert sorted(sum(len(s["input_ids"]) for s in b) for b in bins) == [10, 10, 10]


def test_packing_is_seeded() -> None:
    samples = [sample(n, i) for i, n in enumerate([5] * 12 + [3] * 7 + [9] * 4)]
    tags = [[[s["tag"] for s in b] for b in pack_samples(samples, 16, seed=s)] for s in (0, 0, 1)]
    assert tags[0] == tags[1]
    assert tags[0] != tags[2]


@pytest.mark.parametrize(("n", "phrase"), [(11, "11 tokens do not fit the packing length 10"), (0, "empty sample")])
def test_samples_that_do_not_fit(n: int, phrase: str) -> None:
    samples = [sample(3, 0), {**sample(n, 1), "_source": "train.jsonl:9"}]
    with pytest.raises(DataError, match=rf"^train\.jsonl:9: input_ids: {phrase}"):
        pack_samples(samples, max_length=10)


def test_bad_max_length() -> None:
    with pytest.raises(DataError, match="positive"):
        pack_samples([sample(1, 0)], max_length=0)
