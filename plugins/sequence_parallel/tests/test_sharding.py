"""Global label shift and contiguous sequence shards (no processes needed)."""

from __future__ import annotations

import pytest
import torch
from swiftcore_sequence_parallel.sharding import shard_batch, shift_labels


def test_labels_are_shifted_before_sharding() -> None:
    ids = torch.arange(10, 18).unsqueeze(0)
    shards = [shard_batch({"input_ids": ids, "labels": ids.clone()}, r, 2) for r in range(2)]
    # The last token of shard 0 is labelled with the first token of shard 1; the very last gets -100.
    assert shards[0]["shift_labels"].tolist() == [[11, 12, 13, 14]]
    assert shards[1]["shift_labels"].tolist() == [[15, 16, 17, -100]]
    assert shards[0]["input_ids"].tolist() == [[10, 11, 12, 13]]
    assert shards[1]["position_ids"].tolist() == [[4, 5, 6, 7]]  # global positions, not 0..3
    assert "labels" not in shards[0]


def test_packed_rows_do_not_predict_the_next_sample() -> None:
    labels = torch.tensor([[1, 2, 3, 4, 5, 6]])
    pos = torch.tensor([[0, 1, 2, 0, 1, 0]])
    assert shift_labels(labels, pos).tolist() == [[2, 3, -100, 5, -100, -100]]
    shard = shard_batch({"input_ids": labels, "labels": labels, "position_ids": pos}, 1, 2)
    assert shard["position_ids"].tolist() == [[0, 1, 0]]
    assert shard["shift_labels"].tolist() == [[5, -100, -100]]


def test_padded_batch_keeps_mask_and_shards_every_row() -> None:
    ids = torch.arange(16).reshape(2, 8)
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 5:] = 0
    labels = ids.masked_fill(mask == 0, -100)
    batch = {"input_ids": ids, "attention_mask": mask, "labels": labels}
    first, second = (shard_batch(batch, r, 2) for r in range(2))
    assert second["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 0, 0, 0]]
    # Row 1 is 5 tokens long: its last real token (row index 4, on the second shard) predicts padding.
    assert first["shift_labels"].tolist() == [[1, 2, 3, 4], [9, 10, 11, 12]]
    assert second["shift_labels"].tolist() == [[5, 6, 7, -100], [-100, -100, -100, -100]]


def test_indivisible_sequence_is_refused_with_the_fix() -> None:
    ids = torch.zeros(1, 15, dtype=torch.long)
    with pytest.raises(ValueError, match=r"sequence length 15 is not divisible by the sequence-parallel size 2") as e:
        shard_batch({"input_ids": ids}, 0, 2)
    assert "pad_to_multiple_of=2" in str(e.value) and "16" in str(e.value)


def test_rank_out_of_range() -> None:
    with pytest.raises(ValueError, match="rank 2 is out of range for size 2"):
        shard_batch({"input_ids": torch.zeros(1, 4, dtype=torch.long)}, 2, 2)
