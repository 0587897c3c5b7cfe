"""Qwen3-ASR bridge on a checkpoint from ``swiftcore make-tiny qwen3_asr``: round trip and logit parity."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from swiftcore_megatron import hf_to_mcore, load_mcore_state, mcore_to_hf
from swiftcore_testing import failure_report, run_swiftcore


@pytest.fixture(scope="module")
def asr(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("asr") / "tiny"
    made = run_swiftcore("make-tiny", "qwen3_asr", str(out), timeout=300)
    assert made.returncode == 0, failure_report(made)
    return out


@pytest.fixture(scope="module")
def bridge(asr: Path):  # type: ignore[no-untyped-def]
    from swiftcore_megatron import find_bridge_spec, make_bridge, read_hf_config

    from swiftcore import load_plugins

    spec = find_bridge_spec("qwen3_asr", load_plugins(["bridge_qwen3_asr"]))
    return make_bridge(spec, read_hf_config(asr))


def test_round_trip_carries_the_audio_tower_bit_exact(asr: Path, bridge, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    hf_to_mcore(asr, tmp_path / "mcore", bridge, tp=2)
    rank0 = torch.load(tmp_path / "mcore" / "release" / "mp_rank_00" / "model_optim_rng.pt", weights_only=True)
    assert not any("audio" in k for k in rank0["model"])  # the tower is not in the Megatron model
    carried = load_file(tmp_path / "mcore" / "hf_passthrough" / "model.safetensors")
    assert carried and all(k.startswith(("model.audio_tower.", "model.multi_modal_projector.")) for k in carried)
    mcore_to_hf(tmp_path / "mcore", tmp_path / "back", bridge)
    before, after = load_file(asr / "model.safetensors"), load_file(tmp_path / "back" / "model.safetensors")
    assert sorted(before) == sorted(after)
    assert all(torch.equal(after[k], v) and after[k].dtype == v.dtype for k, v in before.items())
    assert (tmp_path / "back" / "tokenizer.json").is_file() and (tmp_path / "back" / "chat_template.jinja").is_file()


def test_language_model_logit_parity(asr: Path, bridge, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from swiftcore_megatron import check_parity

    hf_to_mcore(asr, tmp_path / "mcore", bridge)
    report = check_parity(asr, bridge, load_mcore_state(tmp_path / "mcore", bridge))
    assert report.ok, report


@pytest.mark.slow
def test_language_model_logit_parity_tp2(asr: Path, bridge, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from swiftcore_megatron import check_parity_tp

    hf_to_mcore(asr, tmp_path / "mcore", bridge, tp=2)
    report = check_parity_tp(asr, tmp_path / "mcore", bridge, 2)
    assert report.ok, report
