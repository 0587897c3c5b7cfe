"""HF -> mcore -> HF conversion of the DeepSeek-V4 bridge: bit-exact round trips, layout per layer type, bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from swiftcore_megatron import PASSTHROUGH_SUBDIR, BridgeError, ParallelismError, hf_to_mcore, mcore_to_hf, rank_file


def _rank(mcore_dir: Path, ep_rank: int, ep: int) -> dict[str, torch.Tensor]:
    return torch.load(rank_file(mcore_dir, 0, ep_rank, ep), weights_only=True)["model"]


def test_plugin_and_bridge_modules_import_no_torch_or_megatron() -> None:
    code = (
        "import sys, swiftcore_bridge_deepseek_v4.plugin as p, swiftcore_bridge_deepseek_v4.bridge; "
        "bad = [m for m in ('torch', 'transformers', 'megatron') if m in sys.modules]; "
        "assert not bad, bad; print(p.SWIFTCORE_API)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1.0"


def test_round_trip_from_expert_parallel_2_is_bit_exact_and_carries_mtp(
        ds4_with_mtp: Path, bridge, mcore_ep2: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    assert len(list((mcore_ep2 / "release").iterdir())) == 2
    carried = load_file(mcore_ep2 / PASSTHROUGH_SUBDIR / "model.safetensors")
    assert sorted(carried) == ["mtp.0.e_proj.weight", "mtp.0.enorm.weight"]
    mcore_to_hf(mcore_ep2, tmp_path / "back", bridge)
    before = load_file(ds4_with_mtp / "model.safetensors")
    after = load_file(tmp_path / "back" / "model.safetensors")
    assert sorted(before) == sorted(after)
    for key, tensor in before.items():
        assert after[key].dtype == tensor.dtype, key
        assert torch.equal(after[key], tensor), key
    assert after["model.layers.0.ffn.gate.tid2eid"].dtype == torch.int64
    assert after["mtp.0.enorm.weight"].dtype == torch.bfloat16


def test_every_layer_type_is_mapped(bridge, mcore_ep2: Path) -> None:  # type: ignore[no-untyped-def]
    """HCA layers have a compressor, the CSA layer also an indexer; hash layers a table, top-k layers a bias."""
    rank0, rank1 = _rank(mcore_ep2, 0, 2), _rank(mcore_ep2, 1, 2)
    assert bridge.attention_types == ["heavily_compressed_attention"] * 3 + ["compressed_sparse_attention"]
    assert bridge.mlp_types == ["hash_moe"] * 3 + ["moe"]
    for i, (attention, mlp) in enumerate(zip(bridge.attention_types, bridge.mlp_types, strict=True)):
        s, m = f"decoder.layers.{i}.self_attention.", f"decoder.layers.{i}.mlp."
        assert {s + "sinks", s + "linear_o_down_proj.weight", s + "compressor.position_bias",
                f"decoder.layers.{i}.attn_hc.fn", f"decoder.layers.{i}.ffn_hc.fn"} <= set(rank0)
        assert (s + "indexer.linear_q_up_proj.weight" in rank0) == (attention == "compressed_sparse_attention")
        assert (m + "router.tid2eid" in rank0) == (mlp == "hash_moe")
        assert (m + "router.expert_bias" in rank0) == (mlp == "moe")
        # 4 experts over 2 expert-parallel ranks: local experts 0 and 1 on each.
        assert m + "experts.local_experts.1.linear_fc1.weight" in rank1
        assert m + "experts.local_experts.2.linear_fc1.weight" not in rank0
    assert not any(k.startswith("mtp") for k in rank0)


def test_expert_fc1_is_w1_then_w3_and_rank1_holds_experts_2_and_3(ds4_tiny: Path, mcore_ep2: Path) -> None:
    hf = load_file(ds4_tiny / "model.safetensors")
    got = _rank(mcore_ep2, 1, 2)["decoder.layers.3.mlp.experts.local_experts.0.linear_fc1.weight"]
    e = "model.layers.3.ffn.experts.2."
    assert torch.equal(got, torch.cat([hf[e + "w1.weight"], hf[e + "w3.weight"]]))


def test_tp_is_refused_with_no_output(ds4_tiny: Path, bridge, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ParallelismError, match="--tp 2: the deepseek_v4 bridge converts at --tp 1 only"):
        hf_to_mcore(ds4_tiny, tmp_path / "mcore", bridge, tp=2)
    assert not (tmp_path / "mcore").exists()


def test_ep_that_does_not_divide_the_experts_is_refused(bridge) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ParallelismError, match="--ep 3 does not divide the 4 experts"):
        bridge.validate_parallelism(1, 3)


@pytest.mark.parametrize(("change", "message"), [
    ({"layer_types": ["sliding_attention", "full_attention", "sliding_attention", "sliding_attention"]},
     "layer_types=.*full_attention"),
    ({"mlp_layer_types": ["moe"]}, "mlp_layer_types=.*expected 4 entries"),
    ({"scoring_func": "softmax"}, "scoring_func='softmax'"),
    ({"rope_parameters": {"main": {"rope_type": "default", "rope_theta": 1e4},
                          "compress": {"rope_type": "yarn", "factor": 16.0, "rope_theta": 1.6e5}}},
     "rope_parameters.compress.rope_type='yarn'"),
    ({"num_key_value_heads": 2}, "num_key_value_heads must be 1"),
])
def test_unsupported_config_is_named(bridge, bridge_for, change, message) -> None:  # type: ignore[no-untyped-def]
    other = bridge_for({**bridge.hf_config, **change})
    with pytest.raises(BridgeError, match=message):
        other.rules()
        other.validate_parallelism(1, 1)


def test_legacy_layer_fields_resolve_like_transformers(bridge, bridge_for) -> None:  # type: ignore[no-untyped-def]
    legacy = {k: v for k, v in bridge.hf_config.items() if k not in ("layer_types", "mlp_layer_types")}
    other = bridge_for({**legacy, "compress_ratios": [0, 4, 128, 4], "num_hash_layers": 1})
    assert other.attention_types == ["sliding_attention", "compressed_sparse_attention",
                                     "heavily_compressed_attention", "compressed_sparse_attention"]
    assert other.mlp_types == ["hash_moe", "moe", "moe", "moe"]
