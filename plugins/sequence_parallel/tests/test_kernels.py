"""Local pieces of the SP attention against plain attention, in one process."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from swiftcore_sequence_parallel.groups import SequenceParallelState, init_sequence_parallel
from swiftcore_sequence_parallel.kernels import (
    KeyLayout,
    block_attention,
    dense_attention,
    low_memory_attention,
    merge_blocks,
)
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


@pytest.mark.parametrize("softcap", [None, 2.0])
@pytest.mark.parametrize("window", [None, 3])
@pytest.mark.parametrize("rows", [9, 4])
def test_low_memory_attention_equals_blockwise_attention(softcap: float | None, window: int | None, rows: int) -> None:
    """Output, log-sum-exp and every gradient (through both) equal the plain blockwise formula; key blocks of 4
    over 9 keys, packed samples, GQA. With the first 4 queries only (one sample), the blocks after the first
    are hidden from every query and skipped."""
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, rows, 16, generator=gen, requires_grad=True)
    k = torch.randn(2, 2, 9, 16, generator=gen, requires_grad=True)
    v = torch.randn(2, 2, 9, 16, generator=gen, requires_grad=True)
    seg = segment_ids(torch.tensor([[0, 1, 2, 3, 0, 1, 2, 3, 0]]))
    q_idx, k_idx = torch.arange(rows), torch.arange(9)
    layout = KeyLayout(q_idx, k_idx, seg, None, True, window)
    mask = allowed_mask(q_idx, k_idx, seg, causal=True, sliding_window=window)
    assert mask[..., 4:].any() == (rows == 9)
    ref, ref_lse = block_attention(q, k, v, mask, scale=0.25, softcap=softcap)
    out, lse = low_memory_attention(q, k, v, layout, scale=0.25, softcap=softcap, block=4)
    weights = torch.randn(ref.shape, generator=gen), torch.randn(ref_lse.shape, generator=gen)
    grads_ref = torch.autograd.grad((ref * weights[0]).sum() + (ref_lse * weights[1]).sum(), (q, k, v))
    grads = torch.autograd.grad((out * weights[0]).sum() + (lse * weights[1]).sum(), (q, k, v))
    assert (out - ref).abs().max() < 1e-6 and (lse - ref_lse).abs().max() < 1e-6
    assert all((a - b).abs().max() < 1e-5 for a, b in zip(grads, grads_ref))


def test_low_memory_attention_keeps_no_scores_for_the_backward() -> None:
    """What autograd keeps is linear in the sequence: q, k, v, output, lse; no S x S scores, masks or weights."""
    sq = sk = 256
    q = torch.randn(1, 2, sq, 8, requires_grad=True)
    k = torch.randn(1, 2, sk, 8, requires_grad=True)
    v = torch.randn(1, 2, sk, 8, requires_grad=True)
    idx = torch.arange(sq)
    layout = KeyLayout(idx, idx, torch.zeros(1, sq, dtype=torch.long), None, True, None)
    saved: list[int] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        low_memory_attention(q, k, v, layout, scale=0.3, block=64)
    assert saved and max(saved) <= 2 * sq * 8  # the largest: q or the output; a score block would be 64 x 256
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        dense_attention(q, k, v, layout.mask(0, sk), scale=0.3)
    assert max(saved) >= sq * sk  # torch's CPU sdpa keeps the S x S mask (as float32): what the kernel avoids


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
