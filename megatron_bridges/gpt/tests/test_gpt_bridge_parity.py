"""Float32 logits of the real megatron-core GPTModel (local spec) vs transformers, on CPU.

megatron-core is imported once for this module (2.5-5 s); models are tiny, so each case takes ~1 s.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from swiftcore_megatron import (
    DEFAULT_TOLERANCE,
    Fuse,
    check_parity,
    check_parity_tp,
    compare_logits,
    hf_logits,
    hf_to_mcore,
    load_mcore_state,
)


@pytest.mark.parametrize("name", ["qwen3", "qwen3_tied", "llama", "qwen3_moe", "qwen3_moe_mixed", "deepseek_v3"])
def test_logit_parity_tp1(tiny, bridge_for, tmp_path: Path, name: str) -> None:
    hf = tiny(name)
    bridge = bridge_for(hf)
    hf_to_mcore(hf, tmp_path / "mcore", bridge)
    report = check_parity(hf, bridge, load_mcore_state(tmp_path / "mcore", bridge))
    assert report.max_abs <= DEFAULT_TOLERANCE, report
    assert report.argmax_agreement == 1.0, report
    assert report.ok and report.positions == 32


def test_moe_parity_from_an_expert_parallel_checkpoint(tiny, bridge_for, tmp_path: Path) -> None:
    hf = tiny("qwen3_moe")
    bridge = bridge_for(hf)
    hf_to_mcore(hf, tmp_path / "mcore", bridge, tp=2, ep=2)
    report = check_parity(hf, bridge, load_mcore_state(tmp_path / "mcore", bridge))
    assert report.ok, report


class _PlainConcat(Fuse):
    """The classic mistake: ``[q; k; v]`` instead of megatron's per-query-group interleave."""

    arity = 3

    def to_mcore(self, tensors):  # type: ignore[no-untyped-def]
        return torch.cat(list(tensors), dim=0)

    def to_hf(self, tensor):  # type: ignore[no-untyped-def]
        return list(torch.split(tensor, [128, 64, 64], dim=0))


def test_negative_control_plain_qkv_concat_fails_parity(tiny, bridge_for, tmp_path: Path) -> None:
    hf = tiny("qwen3")
    good = bridge_for(hf)

    class WrongBridge(type(good)):  # type: ignore[misc]
        def attention_rules(self, i):  # type: ignore[no-untyped-def]
            return [dataclasses.replace(r, fuse=_PlainConcat()) if r.mcore.endswith("linear_qkv.weight") else r
                    for r in super().attention_rules(i)]

    wrong = WrongBridge(good.config)
    hf_to_mcore(hf, tmp_path / "mcore", wrong)
    report = check_parity(hf, wrong, load_mcore_state(tmp_path / "mcore", wrong))
    assert not report.ok
    assert report.max_abs > 1e-2, report


def test_negative_control_dropped_expert_bias_fails_parity(tiny, bridge_for, tmp_path: Path) -> None:
    """The router's expert bias changes which experts are picked: losing it must show in the logits."""
    hf = tiny("deepseek_v3")
    bridge = bridge_for(hf)
    hf_to_mcore(hf, tmp_path / "mcore", bridge)
    state = load_mcore_state(tmp_path / "mcore", bridge)
    for key in [k for k in state if k.endswith("router.expert_bias")]:
        state[key] = torch.zeros_like(state[key])
    assert not check_parity(hf, bridge, state).ok


def test_parity_report_flags_argmax_disagreement() -> None:
    reference = torch.zeros(1, 2, 4)
    reference[0, :, 1] = 1.0
    reference[0, 1, 2] = 1.0 - 1e-6
    other = reference.clone()
    other[0, 1, 1] = 1.0 - 2e-6  # a near tie: within tolerance, but the argmax moves to token 2
    report = compare_logits(reference, other)
    assert report.max_abs <= DEFAULT_TOLERANCE
    assert report.argmax_agreement == 0.5 and not report.ok


def test_converted_back_checkpoint_loads_in_transformers(tiny, bridge_for, tmp_path: Path) -> None:
    from swiftcore_megatron import mcore_to_hf

    hf = tiny("qwen3_moe")
    bridge = bridge_for(hf)
    hf_to_mcore(hf, tmp_path / "mcore", bridge, tp=2, ep=2)
    mcore_to_hf(tmp_path / "mcore", tmp_path / "back", bridge)
    tokens = torch.randint(0, 256, (1, 8), generator=torch.Generator().manual_seed(1))
    assert torch.equal(hf_logits(hf, tokens), hf_logits(tmp_path / "back", tokens))


@pytest.mark.slow
def test_logit_parity_tp2_with_two_gloo_processes(tiny, bridge_for, tmp_path: Path) -> None:
    hf = tiny("qwen3")
    bridge = bridge_for(hf)
    hf_to_mcore(hf, tmp_path / "mcore", bridge, tp=2)
    report = check_parity_tp(hf, tmp_path / "mcore", bridge, 2)
    assert report.ok, report
    assert report.positions == 32
