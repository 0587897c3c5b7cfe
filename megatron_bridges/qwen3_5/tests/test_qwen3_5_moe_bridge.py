"""Qwen3.5-MoE bridge on ``make-tiny qwen3_5_moe``: round trip at TP 2 x EP 2, logit parity, negative control."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from swiftcore_megatron import DEFAULT_TOLERANCE, check_parity, hf_to_mcore, load_mcore_state, mcore_to_hf


@pytest.fixture(scope="module")
def moe(tiny) -> Path:  # type: ignore[no-untyped-def]
    return tiny("qwen3_5_moe")


@pytest.fixture(scope="module")
def moe_bridge(moe: Path, bridge_for):  # type: ignore[no-untyped-def]
    from swiftcore_megatron import read_hf_config

    return bridge_for(read_hf_config(moe))


@pytest.fixture(scope="module")
def moe_mcore(moe: Path, moe_bridge, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    out = tmp_path_factory.mktemp("qwen3_5_moe_mcore") / "tp2ep2"
    hf_to_mcore(moe, out, moe_bridge, tp=2, ep=2)
    return out


def test_round_trip_at_tp2_ep2_is_bit_exact(moe: Path, moe_bridge, moe_mcore: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    assert type(moe_bridge).__name__ == "Qwen3_5MoeBridge"
    assert len(list((moe_mcore / "release").iterdir())) == 4
    mcore_to_hf(moe_mcore, tmp_path / "back", moe_bridge)
    before, after = load_file(moe / "model.safetensors"), load_file(tmp_path / "back" / "model.safetensors")
    assert sorted(before) == sorted(after)
    assert all(torch.equal(after[k], v) and after[k].dtype == v.dtype for k, v in before.items())


def test_logit_parity_from_the_expert_parallel_checkpoint(moe: Path, moe_bridge, moe_mcore: Path) -> None:  # type: ignore[no-untyped-def]
    report = check_parity(moe, moe_bridge, load_mcore_state(moe_mcore, moe_bridge))
    assert report.max_abs <= DEFAULT_TOLERANCE, report
    assert report.argmax_agreement == 1.0, report


def test_negative_control_dropped_shared_expert_gate_fails_parity(moe: Path, moe_bridge, moe_mcore: Path) -> None:  # type: ignore[no-untyped-def]
    """A zero gate halves the shared expert (sigmoid(0) = 0.5): losing the gate must show in the logits."""
    state = load_mcore_state(moe_mcore, moe_bridge)
    gates = [k for k in state if k.endswith("shared_experts.gate_weight")]
    assert len(gates) == moe_bridge.num_layers
    for key in gates:
        state[key] = torch.zeros_like(state[key])
    report = check_parity(moe, moe_bridge, state)
    assert not report.ok
    assert report.max_abs > 1e-3, report


@pytest.mark.slow
def test_logit_parity_tp2_with_two_gloo_processes(moe: Path, moe_bridge, moe_mcore: Path) -> None:  # type: ignore[no-untyped-def]
    from swiftcore_megatron import check_parity_tp

    report = check_parity_tp(moe, moe_mcore, moe_bridge, 2)
    assert report.max_abs <= DEFAULT_TOLERANCE, report
    assert report.argmax_agreement == 1.0, report
