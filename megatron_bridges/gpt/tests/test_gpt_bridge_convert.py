"""HF -> mcore -> HF conversion of the GPT bridges: bit-exact round trips, TP/EP layouts, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from swiftcore_megatron import (
    CheckpointError,
    ParallelismError,
    hf_to_mcore,
    load_mcore_state,
    mcore_to_hf,
    rank_file,
    read_metadata,
)

from swiftcore.errors import OutputExistsError


def _hf_tensors(hf_dir: Path) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for f in sorted(hf_dir.glob("*.safetensors")):
        out.update(load_file(f))
    return out


def _rank(mcore_dir: Path, tp_rank: int, ep_rank: int = 0, ep: int = 1) -> dict[str, torch.Tensor]:
    return torch.load(rank_file(mcore_dir, tp_rank, ep_rank, ep), weights_only=True)["model"]


def test_plugin_module_imports_no_torch_or_megatron() -> None:
    code = (
        "import sys, swiftcore_bridge_gpt.plugin as p; "
        "bad = [m for m in ('torch', 'transformers', 'megatron') if m in sys.modules]; "
        "assert not bad, bad; print(p.SWIFTCORE_API)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1.5"


@pytest.mark.parametrize(
    ("name", "tp", "ep"),
    [("qwen3", 1, 1), ("qwen3", 2, 1), ("qwen3_tied", 2, 1), ("llama", 2, 1), ("qwen3_moe", 1, 1),
     ("qwen3_moe", 2, 2), ("qwen3_moe_mixed", 1, 4), ("deepseek_v3", 1, 2), ("deepseek_v3", 2, 1),
     ("deepseek_v3", 2, 2), ("deepseek_v3", 4, 1)],
)
def test_round_trip_is_bit_exact(tiny, bridge_for, tmp_path: Path, name: str, tp: int, ep: int) -> None:
    hf = tiny(name)
    bridge = bridge_for(hf)
    hf_to_mcore(hf, tmp_path / "mcore", bridge, tp=tp, ep=ep)
    assert len(list((tmp_path / "mcore" / "release").iterdir())) == tp * ep
    mcore_to_hf(tmp_path / "mcore", tmp_path / "back", bridge)
    before, after = _hf_tensors(hf), _hf_tensors(tmp_path / "back")
    assert sorted(before) == sorted(after)
    for key, tensor in before.items():
        assert after[key].dtype == tensor.dtype, key
        assert torch.equal(after[key], tensor), key
    assert json.loads((tmp_path / "back" / "config.json").read_text())["model_type"] == bridge.config["model_type"]


def test_bf16_round_trip_keeps_dtype(build_tiny, bridge_for, tmp_path: Path) -> None:
    hf = build_tiny("qwen3", tmp_path / "hf", dtype="bfloat16")
    bridge = bridge_for(hf)
    hf_to_mcore(hf, tmp_path / "mcore", bridge, tp=2)
    assert read_metadata(tmp_path / "mcore")["dtype"] == "bfloat16"
    assert all(t.dtype == torch.bfloat16 for t in _rank(tmp_path / "mcore", 1).values())
    mcore_to_hf(tmp_path / "mcore", tmp_path / "back", bridge)
    before, after = _hf_tensors(hf), _hf_tensors(tmp_path / "back")
    assert all(torch.equal(after[k], v) and after[k].dtype == torch.bfloat16 for k, v in before.items())


def test_tp2_shards_hold_whole_query_groups_and_split_gate_up(tiny, bridge_for, tmp_path: Path) -> None:
    """The layout megatron expects, rebuilt here from the HF tensors without the bridge's code."""
    hf = tiny("qwen3")
    hf_to_mcore(hf, tmp_path / "mcore", bridge_for(hf), tp=2)
    w = _hf_tensors(hf)
    a, m = "model.layers.1.self_attn.", "model.layers.1.mlp."
    q, k, v = w[a + "q_proj.weight"], w[a + "k_proj.weight"], w[a + "v_proj.weight"]
    d, per_group = 32, 2  # head_dim, query heads per kv group
    for r in range(2):  # 2 kv groups, one per rank
        rank = _rank(tmp_path / "mcore", r)
        expected_qkv = torch.cat([q[r * per_group * d:(r + 1) * per_group * d], k[r * d:(r + 1) * d],
                                  v[r * d:(r + 1) * d]])
        assert torch.equal(rank["decoder.layers.1.self_attention.linear_qkv.weight"], expected_qkv)
        gate, up = w[m + "gate_proj.weight"], w[m + "up_proj.weight"]
        half = gate.shape[0] // 2
        expected_fc1 = torch.cat([gate[r * half:(r + 1) * half], up[r * half:(r + 1) * half]])
        assert torch.equal(rank["decoder.layers.1.mlp.linear_fc1.weight"], expected_fc1)
        o = w[a + "o_proj.weight"]
        assert torch.equal(rank["decoder.layers.1.self_attention.linear_proj.weight"],
                           o[:, r * o.shape[1] // 2:(r + 1) * o.shape[1] // 2])
        emb = w["model.embed_tokens.weight"]
        assert torch.equal(rank["embedding.word_embeddings.weight"], emb[r * 128:(r + 1) * 128])
        assert torch.equal(rank["decoder.layers.1.input_layernorm.weight"], w["model.layers.1.input_layernorm.weight"])


def test_expert_parallel_places_experts_by_rank(tiny, bridge_for, tmp_path: Path) -> None:
    hf = tiny("qwen3_moe")
    hf_to_mcore(hf, tmp_path / "mcore", bridge_for(hf), tp=1, ep=2)
    w = _hf_tensors(hf)
    for ep_rank in range(2):
        rank = _rank(tmp_path / "mcore", 0, ep_rank, ep=2)
        experts = {k for k in rank if ".local_experts." in k and k.startswith("decoder.layers.0.")}
        assert {k.split(".local_experts.")[1].split(".")[0] for k in experts} == {"0", "1"}
        for local in range(2):
            down = w[f"model.layers.0.mlp.experts.{ep_rank * 2 + local}.down_proj.weight"]
            assert torch.equal(rank[f"decoder.layers.0.mlp.experts.local_experts.{local}.linear_fc2.weight"], down)
        # Dense weights are replicated on every expert-parallel rank.
        assert torch.equal(rank["decoder.layers.0.mlp.router.weight"], w["model.layers.0.mlp.gate.weight"])


def test_reshard_on_read_matches_direct_conversion(tiny, bridge_for, tmp_path: Path) -> None:
    hf = tiny("qwen3_moe")
    bridge = bridge_for(hf)
    hf_to_mcore(hf, tmp_path / "tp2ep2", bridge, tp=2, ep=2)
    hf_to_mcore(hf, tmp_path / "tp1", bridge, tp=1)
    direct = _rank(tmp_path / "tp1", 0)
    resharded = load_mcore_state(tmp_path / "tp2ep2", bridge, tp=1)
    assert sorted(direct) == sorted(resharded)
    assert all(torch.equal(direct[k], resharded[k]) for k in direct)


def test_sharded_hf_checkpoint_streams_from_every_shard(build_tiny, bridge_for, tmp_path: Path) -> None:
    hf = build_tiny("qwen3", tmp_path / "hf", max_shard_size="100KB")
    assert len(list(hf.glob("*.safetensors"))) > 2
    bridge = bridge_for(hf)
    hf_to_mcore(hf, tmp_path / "mcore", bridge)
    mcore_to_hf(tmp_path / "mcore", tmp_path / "back", bridge, max_shard_bytes=100 * 1024)
    index = json.loads((tmp_path / "back" / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 2
    before, after = _hf_tensors(hf), _hf_tensors(tmp_path / "back")
    assert sorted(before) == sorted(after) and all(torch.equal(after[k], v) for k, v in before.items())


# ----------------------------------------------------------------------------------- bad input


def test_tp_not_dividing_heads_fails_before_writing(tiny, bridge_for, tmp_path: Path) -> None:
    hf = tiny("qwen3")
    with pytest.raises(ParallelismError, match="--tp 3 does not divide config.json num_attention_heads=4"):
        hf_to_mcore(hf, tmp_path / "mcore", bridge_for(hf), tp=3)
    assert list(tmp_path.iterdir()) == []


def test_ep_not_dividing_experts_and_ep_on_dense(tiny, bridge_for, tmp_path: Path) -> None:
    with pytest.raises(ParallelismError, match="does not divide the 4 experts"):
        hf_to_mcore(tiny("qwen3_moe"), tmp_path / "a", bridge_for(tiny("qwen3_moe")), ep=3)
    with pytest.raises(ParallelismError, match="has no experts"):
        hf_to_mcore(tiny("qwen3"), tmp_path / "b", bridge_for(tiny("qwen3")), ep=2)
    assert list(tmp_path.iterdir()) == []


def test_deepseek_tp_not_dividing_an_mla_latent_rank_fails_before_writing(tiny, bridge_for, tmp_path: Path) -> None:
    """--tp 4 divides the 4 heads and every FFN width but not q_lora_rank=42: megatron splits that too."""
    hf = tiny("deepseek_v3")
    bridge = bridge_for(hf)
    odd = type(bridge)({**bridge.config, "q_lora_rank": 42})
    with pytest.raises(ParallelismError, match=r"--tp 4 does not divide config.json q_lora_rank=42"):
        hf_to_mcore(hf, tmp_path / "mcore", odd, tp=4)
    odd = type(bridge)({**bridge.config, "kv_lora_rank": 30})
    with pytest.raises(ParallelismError, match=r"kv_lora_rank \+ qk_rope_head_dim=46"):
        hf_to_mcore(hf, tmp_path / "mcore", odd, tp=4)
    assert list(tmp_path.iterdir()) == []


def test_missing_shard_is_named_and_leaves_no_output(build_tiny, bridge_for, tmp_path: Path) -> None:
    hf = build_tiny("qwen3", tmp_path / "hf", max_shard_size="100KB")
    victim = sorted(hf.glob("*.safetensors"))[1]
    victim.unlink()
    with pytest.raises(CheckpointError, match=f"{victim.name} is missing"):
        hf_to_mcore(hf, tmp_path / "mcore", bridge_for(hf))
    assert not (tmp_path / "mcore").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["hf"]


def test_config_inconsistent_with_weights_is_refused(tiny, bridge_for, tmp_path: Path) -> None:
    import shutil

    hf = tmp_path / "hf"
    shutil.copytree(tiny("qwen3"), hf)
    config = json.loads((hf / "config.json").read_text())
    config["num_hidden_layers"] = 3
    (hf / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"lacks: model\.layers\.2\."):
        hf_to_mcore(hf, tmp_path / "mcore", bridge_for(hf))
    config["num_hidden_layers"] = 1
    (hf / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"no rule for tensors model\.layers\.1\."):
        hf_to_mcore(hf, tmp_path / "mcore", bridge_for(hf))
    assert not (tmp_path / "mcore").exists()


def test_existing_output_is_not_overwritten(tiny, bridge_for, tmp_path: Path) -> None:
    (tmp_path / "mcore").mkdir()
    (tmp_path / "mcore" / "keep.txt").write_text("mine")
    with pytest.raises(OutputExistsError, match="already exists and is not empty"):
        hf_to_mcore(tiny("qwen3"), tmp_path / "mcore", bridge_for(tiny("qwen3")))
    assert (tmp_path / "mcore" / "keep.txt").read_text() == "mine"


def test_missing_rank_file_is_refused_on_the_way_back(tiny, bridge_for, tmp_path: Path) -> None:
    hf = tiny("qwen3")
    bridge = bridge_for(hf)
    hf_to_mcore(hf, tmp_path / "mcore", bridge, tp=2)
    rank_file(tmp_path / "mcore", 1, 0, 1).unlink()
    with pytest.raises(CheckpointError, match="mp_rank_01/model_optim_rng.pt is missing"):
        mcore_to_hf(tmp_path / "mcore", tmp_path / "back", bridge)
    assert not (tmp_path / "back").exists()
