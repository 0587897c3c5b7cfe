"""The shared parts of per-family packed-batch patches (``swiftcore_data.packed_layers``)."""

from __future__ import annotations

import pytest
import torch
from swiftcore_data.packed_layers import (
    PackedBatchError,
    packed_cu_seq_lens,
    packed_segments,
    transformers_in_range,
    wrap_forward,
)


def test_cu_seq_lens_and_segments_agree_on_position_id_restarts() -> None:
    positions = torch.tensor([[0, 1, 0, 1, 2], [0, 1, 2, 3, 4]])
    assert packed_cu_seq_lens(positions).tolist() == [0, 2, 5, 10]
    assert packed_segments(positions, None, 2, 5) == [(0, 0, 2), (0, 2, 5), (1, 0, 5)]
    # A broadcast batch of one position row serves every row.
    assert packed_segments(torch.tensor([[0, 1, 0]]), None, 2, 3) == [(0, 0, 2), (0, 2, 3), (1, 0, 2), (1, 2, 3)]
    assert packed_segments(None, None, 1, 4) is None


def test_segments_refuse_boundaries_that_do_not_fit() -> None:
    with pytest.raises(PackedBatchError, match=r"\[0, 2, 2, 4\] does not cover the 1x4 tokens"):
        packed_segments(None, torch.tensor([0, 2, 2, 4]), 1, 4)  # an empty sample
    with pytest.raises(PackedBatchError, match="tokens 2..5 spans rows of 4 tokens"):
        packed_segments(None, torch.tensor([0, 2, 6, 8]), 2, 4)


def test_wrap_forward_keeps_the_old_forward_and_patches_once() -> None:
    layer = torch.nn.Linear(2, 2)

    def doubled(self: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        return 2 * self._swiftcore_unpacked_forward(x)

    x = torch.ones(1, 2)
    plain = layer(x)
    assert wrap_forward(layer, doubled) is True
    assert wrap_forward(layer, doubled) is False
    assert torch.equal(layer(x), 2 * plain)
    assert torch.equal(torch.nn.Linear.forward(layer, x), plain)  # the class is untouched


def test_transformers_range() -> None:
    assert transformers_in_range(">=5")
    assert not transformers_in_range("<1")
