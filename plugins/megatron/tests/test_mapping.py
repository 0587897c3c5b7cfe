"""Mapping primitives: each fuse and shard inverts exactly, and produces megatron's layout."""

from __future__ import annotations

import pytest
import torch
from swiftcore_megatron import MappingError, ParallelismError
from swiftcore_megatron.mapping import COLUMN, QKV, REPLICATED, ROW, Concat, Rule, Shard


def _rows(n: int, start: int = 0, cols: int = 3) -> torch.Tensor:
    """Row i holds the value start + i everywhere, so a row's origin is readable."""
    return (torch.arange(start, start + n, dtype=torch.float32)[:, None]).expand(n, cols).clone()


def test_qkv_interleaves_per_query_group() -> None:
    # 4 query heads, 2 groups, head_dim 1: q rows 0..3, k rows 10..11, v rows 20..21.
    fuse = QKV(num_heads=4, num_groups=2, head_dim=1)
    fused = fuse.to_mcore([_rows(4), _rows(2, 10), _rows(2, 20)])
    assert fused[:, 0].tolist() == [0, 1, 10, 20, 2, 3, 11, 21]


@pytest.mark.parametrize(("heads", "groups", "dim"), [(4, 2, 3), (8, 8, 2), (6, 1, 4), (4, 4, 1)])
def test_qkv_round_trip(heads: int, groups: int, dim: int) -> None:
    q, k, v = torch.randn(heads * dim, 5), torch.randn(groups * dim, 5), torch.randn(groups * dim, 5)
    fuse = QKV(heads, groups, dim)
    back = fuse.to_hf(fuse.to_mcore([q, k, v]))
    assert all(torch.equal(a, b) for a, b in zip(back, [q, k, v], strict=True))
    bias = [torch.randn(heads * dim), torch.randn(groups * dim), torch.randn(groups * dim)]
    assert all(torch.equal(a, b) for a, b in zip(fuse.to_hf(fuse.to_mcore(bias)), bias, strict=True))


def test_qkv_rejects_wrong_shapes() -> None:
    with pytest.raises(MappingError, match="QKV expects q/k/v with"):
        QKV(4, 2, 8).to_mcore([torch.zeros(32, 4), torch.zeros(32, 4), torch.zeros(16, 4)])


def test_gate_up_shard_gives_each_rank_its_gate_and_up_slices() -> None:
    fc1 = Concat(2).to_mcore([_rows(4), _rows(4, 100)])
    shards = Shard(0, blocks=2).split(fc1, 2)
    assert shards[0][:, 0].tolist() == [0, 1, 100, 101]
    assert shards[1][:, 0].tolist() == [2, 3, 102, 103]
    assert torch.equal(Shard(0, blocks=2).merge(shards), fc1)


@pytest.mark.parametrize("shard", [COLUMN, ROW, Shard(0, blocks=2), Shard(1, blocks=2)])
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_split_merge_round_trip(shard: Shard, tp: int) -> None:
    t = torch.randn(16, 8)
    parts = shard.split(t, tp)
    assert len(parts) == tp
    assert torch.equal(shard.merge(parts), t)


def test_row_split_is_on_the_input_dim() -> None:
    t = torch.arange(12.0).reshape(2, 6)
    assert ROW.split(t, 2)[1].tolist() == [[3, 4, 5], [9, 10, 11]]


def test_split_refuses_a_size_tp_does_not_divide() -> None:
    with pytest.raises(ParallelismError, match="size 6 cannot be split into 4"):
        COLUMN.split(torch.zeros(6, 2), 4, what="w")


def test_replicated_merge_detects_divergent_ranks() -> None:
    a = torch.ones(3)
    assert torch.equal(REPLICATED.merge([a, a.clone()]), a)
    with pytest.raises(MappingError, match="differs between TP rank 0 and rank 1"):
        REPLICATED.merge([a, a + 1], what="norm")


def test_rule_checks_arity_and_expert_placeholder() -> None:
    with pytest.raises(MappingError, match="takes 3 HF tensors"):
        Rule("x.weight", ("a",), QKV(2, 1, 1))
    with pytest.raises(MappingError, match="expert rules"):
        Rule("experts.{expert}.w", ("a",))
    rule = Rule("experts.local_experts.{expert}.w", ("e5",), expert=5)
    assert rule.mcore_key(num_local_experts=4) == "experts.local_experts.1.w"
