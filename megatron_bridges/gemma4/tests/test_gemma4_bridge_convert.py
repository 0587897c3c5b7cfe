"""HF -> mcore -> HF conversion of the Gemma 4 bridge: bit-exact round trips, layer kinds, TP layouts, bad input."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from swiftcore_megatron import PASSTHROUGH_SUBDIR, BridgeError, ParallelismError, hf_to_mcore, mcore_to_hf, rank_file

TOWERS = ("model.vision_tower.", "model.audio_tower.", "model.embed_vision.", "model.embed_audio.")


def _rank(mcore_dir: Path, tp_rank: int) -> dict[str, torch.Tensor]:
    return torch.load(rank_file(mcore_dir, tp_rank, 0, 1), weights_only=True)["model"]


def _assert_same_tensors(before_dir: Path, after_dir: Path) -> None:
    before = load_file(before_dir / "model.safetensors")
    after = load_file(after_dir / "model.safetensors")
    assert sorted(before) == sorted(after)
    for key, tensor in before.items():
        assert after[key].dtype == tensor.dtype, key
        assert torch.equal(after[key], tensor), key


def test_plugin_and_bridge_modules_import_no_torch_or_megatron() -> None:
    code = (
        "import sys, swiftcore_bridge_gemma4.plugin as p, swiftcore_bridge_gemma4.bridge, "
        "swiftcore_bridge_gemma4.facts, swiftcore_bridge_gemma4.mapping; "
        "bad = [m for m in ('torch', 'transformers', 'megatron') if m in sys.modules]; "
        "assert not bad, bad; print(p.SWIFTCORE_API)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1.0"


def test_round_trip_at_tp2_is_bit_exact_and_carries_the_towers(gemma4_tiny: Path, bridge, mcore_tp2: Path,
                                                                tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    rank0 = _rank(mcore_tp2, 0)
    assert not any("tower" in k or "embed_vision" in k or "embed_audio" in k for k in rank0)
    carried = load_file(mcore_tp2 / PASSTHROUGH_SUBDIR / "model.safetensors")
    assert {p for p in TOWERS if any(k.startswith(p) for k in carried)} == set(TOWERS)
    assert all(k.startswith(TOWERS) for k in carried)
    mcore_to_hf(mcore_tp2, tmp_path / "back", bridge)
    _assert_same_tensors(gemma4_tiny, tmp_path / "back")


@pytest.mark.parametrize("tp", [1, 2])
def test_extras_round_trip_is_bit_exact(gemma4_extras: Path, extras_bridge, tmp_path: Path, tp: int) -> None:  # type: ignore[no-untyped-def]
    hf_to_mcore(gemma4_extras, tmp_path / "mcore", extras_bridge, tp=tp)
    mcore_to_hf(tmp_path / "mcore", tmp_path / "back", extras_bridge)
    _assert_same_tensors(gemma4_extras, tmp_path / "back")


def test_extras_layers_match_the_transformers_modules(gemma4_extras: Path, extras_bridge) -> None:  # type: ignore[no-untyped-def]
    """Every LayerFacts field the spec reads agrees with what transformers actually built."""
    from transformers import AutoConfig, Gemma4ForCausalLM

    with torch.device("meta"):
        model = Gemma4ForCausalLM(AutoConfig.from_pretrained(gemma4_extras))
    for facts, layer in zip(extras_bridge.facts, model.model.layers, strict=True):
        attn = layer.self_attn
        assert facts.head_dim == attn.head_dim
        assert facts.num_kv_heads == extras_bridge.num_heads // attn.num_key_value_groups
        assert facts.sliding_window == attn.sliding_window
        assert facts.kv_shared == attn.is_kv_shared_layer
        assert facts.stores_kv == (attn.store_full_length_kv and any(f.kv_shared for f in extras_bridge.facts))
        assert facts.k_eq_v == attn.use_alternative_attention
        assert facts.ffn_hidden_size == layer.mlp.intermediate_size
        assert facts.moe == layer.enable_moe_block
    kinds = [(f.kv_source, f.stores_kv, f.k_eq_v, f.ffn_hidden_size) for f in extras_bridge.facts]
    assert kinds == [(None, False, False, 128), (None, True, True, 128), (None, True, False, 128),
                     (2, False, False, 256), (1, False, True, 256)]


def test_every_layer_kind_has_its_tensors(extras_bridge, extras_mcore_tp2: Path) -> None:  # type: ignore[no-untyped-def]
    rank0 = _rank(extras_mcore_tp2, 0)
    heads, d_full, d_slide = 4, 64, 32
    for f in extras_bridge.facts:
        s = f"decoder.layers.{f.index}.self_attention."
        if f.kv_shared:  # queries only; keys/values come from layer kv_source
            assert s + "linear_q.weight" in rank0 and s + "linear_qkv.weight" not in rank0
            assert s + "k_layernorm.weight" not in rank0
            continue
        rows = rank0[s + "linear_qkv.weight"].shape[0] * 2  # two TP ranks
        d = d_full if f.layer_type == "full_attention" else d_slide
        assert rows == (heads + f.num_kv_heads * (1 if f.k_eq_v else 2)) * d
    m = "decoder.layers.0."
    assert rank0[m + "moe.experts.gate_up_weight"].shape == (4, 2 * 32 // 2, 64)
    assert rank0[m + "moe.experts.down_weight"].shape == (4, 64, 32 // 2)
    assert rank0[m + "per_layer_input_gate.weight"].shape == (16 // 2, 64)
    assert rank0["per_layer_embedding.embed_tokens.weight"].shape == (256 // 2, 5 * 16)
    assert "output_layer.weight" in rank0  # untied head


def test_tp_rank_holds_gate_and_up_halves_of_every_expert(gemma4_extras: Path, extras_mcore_tp2: Path) -> None:
    hf = load_file(gemma4_extras / "model.safetensors")["model.layers.1.experts.gate_up_proj"]
    gate, up = hf.chunk(2, dim=1)
    for r in range(2):
        got = _rank(extras_mcore_tp2, r)["decoder.layers.1.moe.experts.gate_up_weight"]
        assert torch.equal(got, torch.cat([gate.chunk(2, dim=1)[r], up.chunk(2, dim=1)[r]], dim=1))


def test_released_kv_shared_tensors_are_carried_through(gemma4_extras: Path, extras_bridge, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Released checkpoints may hold k/v weights for kv-shared layers (transformers ignores them): keep them."""
    hf = tmp_path / "hf"
    shutil.copytree(gemma4_extras, hf)
    tensors = load_file(hf / "model.safetensors")
    tensors["model.layers.3.self_attn.k_proj.weight"] = torch.randn(128, 64)
    tensors["model.layers.3.self_attn.k_norm.weight"] = torch.randn(32)
    save_file(tensors, hf / "model.safetensors", metadata={"format": "pt"})
    hf_to_mcore(hf, tmp_path / "mcore", extras_bridge)
    carried = load_file(tmp_path / "mcore" / PASSTHROUGH_SUBDIR / "model.safetensors")
    assert sorted(carried) == ["model.layers.3.self_attn.k_norm.weight", "model.layers.3.self_attn.k_proj.weight"]
    mcore_to_hf(tmp_path / "mcore", tmp_path / "back", extras_bridge)
    _assert_same_tensors(hf, tmp_path / "back")


def test_tp_that_does_not_divide_a_layers_kv_heads_leaves_no_output(gemma4_extras: Path, extras_bridge,
                                                                     tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ParallelismError, match=r"num_key_value_heads \(layer 1, full_attention\)=2"):
        hf_to_mcore(gemma4_extras, tmp_path / "mcore", extras_bridge, tp=4)
    assert not (tmp_path / "mcore").exists()


def test_expert_parallelism_is_refused_with_the_reason(extras_bridge) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ParallelismError, match="experts fused"):
        extras_bridge.validate_parallelism(1, 2)


@pytest.mark.parametrize(("change", "match"), [
    ({"rope_parameters": {"sliding_attention": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 2.0},
                          "full_attention": {"rope_type": "default", "rope_theta": 1e6}}}, "rope_type='yarn'"),
    ({"layer_types": ["sliding_attention", "chunked"]}, "layer_types"),
    ({"per_layer_config": {"1": {"intermediate_size": 7}}}, r"overrides \['intermediate_size'\]"),
    ({"use_bidirectional_attention": "all"}, "use_bidirectional_attention"),
    ({"num_kv_shared_layers": 4, "layer_types": ["sliding_attention"] * 4 + ["full_attention"]}, "no earlier layer"),
])
def test_unsupported_configs_are_named(extras_bridge, bridge_for, change, match) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(BridgeError, match=match):
        bridge_for({**extras_bridge.config, **change}).validate_parallelism(1, 1)


def test_multimodal_and_text_only_checkpoints_use_their_prefixes(bridge, extras_bridge) -> None:  # type: ignore[no-untyped-def]
    multimodal = [k for rule in bridge.rules() for k in rule.hf]
    text_only = [k for rule in extras_bridge.rules() for k in rule.hf]
    assert all(k.startswith("model.language_model.") for k in multimodal)
    assert all(k.startswith(("model.", "lm_head.")) and "language_model" not in k for k in text_only)
    assert bridge.placeholder_token_ids() and not extras_bridge.placeholder_token_ids()
