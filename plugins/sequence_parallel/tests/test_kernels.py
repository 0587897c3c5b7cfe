"""Local pieces of the SP attention against plain attention, in one process."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from swiftcore_sequence_parallel.groups import SequenceParallelState, init_sequence_parallel
from swiftcore_sequence_parallel.kernels import block_attention, dense_attention, merge_blocks
from swiftcore_sequence_parallel.masks import allowed_mask, segment_ids
from swiftcore_sequence_parallel.ulysses import check_heads


@pytest.mark.parametrize("softcap", [None, 2.0])
def test_online_softmax_over_blocks_equals_dense_attention(softcap: float | None) -> None:
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 8, 16, generator=gen, requires_grad=True)
    k = torch.randn(2, 2, 8, 16, generator=gen, requires_grad=True)
    v = torch.randn(2, 2, 8, 16, generator=gen, requires_grad=True)
    seg = segment_ids(torch.tensor([[0, 1, 2, 0, 1, 2, 3, 4]]))
    idx = torch.arange(8)
    mask = allowed_mask(idx, idx, seg, causal=True, sliding_window=3)
    ref = dense_attention(q, k, v, mask, scale=0.25, softcap=softcap)
    grads_ref = torch.autograd.grad(ref.square().sum(), (q, k, v))
    out = lse = None
    for blk in (idx[4:], idx[:4]):  # any block order; the second block is fully hidden from some rows
        o, s = block_attention(q, k[:, :, blk], v[:, :, blk], mask[..., blk], scale=0.25, softcap=softcap)
        out, lse = (o, s) if out is None else merge_blocks(out, lse, o, s)
    grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    assert (out - ref).abs().max() < 1e-6
    assert all((a - b).abs().max() < 1e-5 for a, b in zip(grads, grads_ref))


def test_mask_rules() -> None:
    seg = segment_ids(torch.tensor([[0, 1, 2, 0, 1]]))
    idx = torch.arange(5)
    m = allowed_mask(idx, idx, seg, torch.tensor([[True, True, True, True, False]]), sliding_window=2)[0, 0]
    expected = [
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [0, 1, 1, 0, 0],  # window of 2 rows
        [0, 0, 0, 1, 0],  # a new sample starts: nothing before it
        [0, 0, 0, 1, 0],  # the key at row 4 is padding
    ]
    assert m.int().tolist() == expected


def test_heads_not_divisible_is_refused() -> None:
    with pytest.raises(ValueError, match=r"head count divisible by 3, but the model has 4 attention heads"):
        check_heads(4, 3)
    check_heads(4, 2)
    check_heads(3, 1)


def test_enable_refuses_a_model_whose_heads_do_not_split() -> None:
    from swiftcore_sequence_parallel.attention import enable_sequence_parallel
    from swiftcore_sequence_parallel.testing import tiny_model

    state = SequenceParallelState("ulysses", 3, 0, None, 3, 0, None, 1, 0, None, (0,))
    with pytest.raises(ValueError, match="the model has 4 attention heads"):
        enable_sequence_parallel(tiny_model("qwen3"), state)


def test_bad_mode_and_no_process_group() -> None:
    with pytest.raises(ValueError, match="unknown sequence-parallel mode 'zigzag'"):
        init_sequence_parallel(2, "zigzag")
    import torch.distributed as dist

    if not dist.is_initialized():  # an earlier test of the session may have made the default group
        with pytest.raises(RuntimeError, match="init_process_group"):
            init_sequence_parallel(2, "ring")


def test_import_is_cheap() -> None:
    code = (
        "import sys, swiftcore_sequence_parallel.groups, swiftcore_sequence_parallel.sharding; "
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_attention_needs_the_matching_active_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    from swiftcore_sequence_parallel import groups
    from swiftcore_sequence_parallel.attention import _attention_for

    with pytest.raises(RuntimeError, match="call init_sequence_parallel"):
        _attention_for("sp_ring")(None, None, None, None, None)
    state = SequenceParallelState("ulysses", 2, 0, None, 2, 0, None, 1, 0, None, (0,))
    monkeypatch.setattr(groups, "_ACTIVE", state)
    with pytest.raises(RuntimeError, match="asks for 'sp_ring' but sequence parallelism was initialised in 'ulysses'"):
        _attention_for("sp_ring")(None, None, None, None, None)
