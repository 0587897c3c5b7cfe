"""HF -> mcore -> HF conversion of the Qwen3.5 bridge: bit-exact round trips, TP layouts, bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from swiftcore_megatron import PASSTHROUGH_SUBDIR, BridgeError, ParallelismError, hf_to_mcore, mcore_to_hf, rank_file

LM = "model.language_model.layers."


def _rank(mcore_dir: Path, tp_rank: int) -> dict[str, torch.Tensor]:
    return torch.load(rank_file(mcore_dir, tp_rank, 0, 1), weights_only=True)["model"]


def test_plugin_module_imports_no_torch_or_megatron() -> None:
    code = (
        "import sys, swiftcore_bridge_qwen3_5.plugin as p, swiftcore_bridge_qwen3_5.bridge, "
        "swiftcore_bridge_qwen3_5.mapping; "
        "bad = [m for m in ('torch', 'transformers', 'megatron') if m in sys.modules]; "
        "assert not bad, bad; print(p.SWIFTCORE_API)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1.0"


@pytest.mark.parametrize("tp", [1, 2])
def test_round_trip_is_bit_exact_and_carries_vision_and_mtp(qwen3_5_with_mtp: Path, bridge, tmp_path: Path,
                                                            tp: int) -> None:  # type: ignore[no-untyped-def]
    hf_to_mcore(qwen3_5_with_mtp, tmp_path / "mcore", bridge, tp=tp)
    rank0 = _rank(tmp_path / "mcore", 0)
    assert not any("visual" in k or "mtp" in k for k in rank0)
    carried = load_file(tmp_path / "mcore" / PASSTHROUGH_SUBDIR / "model.safetensors")
    assert any(k.startswith("mtp.") for k in carried) and any(k.startswith("model.visual.") for k in carried)
    assert all(k.startswith(("mtp.", "model.visual.")) for k in carried)
    mcore_to_hf(tmp_path / "mcore", tmp_path / "back", bridge)
    before = load_file(qwen3_5_with_mtp / "model.safetensors")
    after = load_file(tmp_path / "back" / "model.safetensors")
    assert sorted(before) == sorted(after)
    for key, tensor in before.items():
        assert after[key].dtype == tensor.dtype, key
        assert torch.equal(after[key], tensor), key


def test_every_layer_type_is_mapped(bridge, mcore_tp2: Path) -> None:  # type: ignore[no-untyped-def]
    rank0 = _rank(mcore_tp2, 0)
    for i, kind in enumerate(bridge.layer_types):
        prefix = f"decoder.layers.{i}.self_attention."
        if kind == "linear_attention":
            assert {prefix + n for n in ("in_proj.weight", "conv1d.weight", "A_log", "dt_bias", "out_norm.weight",
                                         "out_proj.weight")} <= set(rank0)
        else:
            assert {prefix + n for n in ("linear_qkv.weight", "q_layernorm.weight", "linear_proj.weight")} <= set(rank0)
    assert "linear_attention" in bridge.layer_types and "full_attention" in bridge.layer_types


def test_tp_rank_holds_its_heads_of_every_delta_net_part(qwen3_5_tiny: Path, bridge, mcore_tp2: Path) -> None:  # type: ignore[no-untyped-def]
    """Rank r's ``in_proj`` is ``[q_r; k_r; v_r; z_r; b_r; a_r]``: how megatron's GatedDeltaNet splits it."""
    hf = load_file(qwen3_5_tiny / "model.safetensors")
    i = bridge.layer_types.index("linear_attention")
    a = f"{LM}{i}.linear_attn."
    c = bridge.config
    qk = c["linear_num_key_heads"] * c["linear_key_head_dim"]
    v = c["linear_num_value_heads"] * c["linear_value_head_dim"]
    q, k, val = torch.split(hf[a + "in_proj_qkv.weight"], [qk, qk, v])
    parts = [q, k, val, hf[a + "in_proj_z.weight"], hf[a + "in_proj_b.weight"], hf[a + "in_proj_a.weight"]]
    for r in range(2):
        expected = torch.cat([p.chunk(2)[r] for p in parts])
        got = _rank(mcore_tp2, r)[f"decoder.layers.{i}.self_attention.in_proj.weight"]
        assert torch.equal(got, expected)
        conv = _rank(mcore_tp2, r)[f"decoder.layers.{i}.self_attention.conv1d.weight"]
        expected_conv = torch.cat([c.chunk(2)[r] for c in torch.split(hf[a + "conv1d.weight"], [qk, qk, v])])
        assert torch.equal(conv, expected_conv)


def test_tp_that_does_not_divide_the_linear_heads_is_refused(bridge, bridge_for, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    config = {**bridge.hf_config, "text_config": {**bridge.config, "linear_num_key_heads": 1}}
    with pytest.raises(ParallelismError, match="linear_num_key_heads=1"):
        bridge_for(config).validate_parallelism(2, 1)


def test_tp_that_does_not_divide_the_kv_heads_leaves_no_output(qwen3_5_tiny: Path, bridge, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ParallelismError, match="num_key_value_heads"):
        hf_to_mcore(qwen3_5_tiny, tmp_path / "mcore", bridge, tp=4)
    assert not (tmp_path / "mcore").exists()


def test_bad_layer_types_are_named(bridge, bridge_for) -> None:  # type: ignore[no-untyped-def]
    config = {**bridge.hf_config, "text_config": {**bridge.config, "layer_types": ["linear_attention", "sliding"]}}
    with pytest.raises(BridgeError, match="layer_types"):
        bridge_for(config).rules()


def test_text_only_checkpoint_uses_the_unnested_prefix(bridge, bridge_for) -> None:  # type: ignore[no-untyped-def]
    text_only = bridge_for({**bridge.config, "model_type": "qwen3_5_text"})
    keys = [k for rule in text_only.rules() for k in rule.hf]
    assert keys and all(k.startswith(("model.layers.", "model.embed_tokens.", "model.norm.", "lm_head.")) for k in keys)
    assert len(keys) == len([k for rule in bridge.rules() for k in rule.hf])
