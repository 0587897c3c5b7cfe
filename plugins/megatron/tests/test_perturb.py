"""perturb_checkpoint: every tensor and rope base moved, deterministically, and nothing that must stay put."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from swiftcore_megatron.perturb import ROPE_FACTOR, constant_tensors, perturb_checkpoint

CONFIG = {
    "model_type": "toy",
    "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
    "text_config": {
        "rope_parameters": {"full_attention": {"rope_theta": 1e6}, "sliding_attention": {"rope_theta": 1e4}},
    },
    "compress_rope_theta": 160000,
    "rms_norm_eps": 1e-6,
}


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    """A toy checkpoint: two all-ones norms, a zero bias, a tied random pair, an index table, a clamp bound."""
    out = tmp_path / "hf"
    out.mkdir()
    embed = torch.randn(8, 4, generator=torch.Generator().manual_seed(0))
    tensors = {
        "model.layers.0.input_layernorm.weight": torch.ones(4),
        "model.layers.0.post_attention_layernorm.weight": torch.ones(4),
        "model.layers.0.self_attn.q_proj.bias": torch.zeros(4),
        "model.embed_tokens.weight": embed,
        "lm_head.weight": embed.clone(),
        "model.layers.0.mlp.tid2eid": torch.zeros(8, dtype=torch.int64),
        "model.audio.input_max": torch.full((1,), float("inf")),
        "model.layers.0.layer_scalar": torch.ones(1, dtype=torch.bfloat16),
    }
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(CONFIG), encoding="utf-8")
    (out / "tokenizer.json").write_text("{}", encoding="utf-8")
    return out


def test_every_floating_tensor_moves_and_the_constants_come_apart(checkpoint: Path, tmp_path: Path) -> None:
    before = load_file(checkpoint / "model.safetensors")
    after = load_file(perturb_checkpoint(checkpoint, tmp_path / "p") / "model.safetensors")
    for name in (
        "model.layers.0.input_layernorm.weight",
        "model.layers.0.self_attn.q_proj.bias",
        "model.embed_tokens.weight",
        "model.layers.0.layer_scalar",
    ):
        assert not torch.equal(before[name], after[name]), name
        assert after[name].dtype == before[name].dtype
    # The two all-ones norms no longer match each other: a bridge swapping them now changes the logits.
    assert not torch.equal(
        after["model.layers.0.input_layernorm.weight"], after["model.layers.0.post_attention_layernorm.weight"]
    )
    assert torch.equal(after["model.embed_tokens.weight"], after["lm_head.weight"])  # tied stays tied
    assert torch.equal(after["model.layers.0.mlp.tid2eid"], before["model.layers.0.mlp.tid2eid"])
    assert torch.equal(after["model.audio.input_max"], before["model.audio.input_max"])
    # Noise small enough to keep the model's scale.
    assert (after["model.embed_tokens.weight"] - before["model.embed_tokens.weight"]).std() < 0.2 * before[
        "model.embed_tokens.weight"
    ].std()


def test_it_is_deterministic_and_seeded(checkpoint: Path, tmp_path: Path) -> None:
    one = (perturb_checkpoint(checkpoint, tmp_path / "a", seed=0) / "model.safetensors").read_bytes()
    two = (perturb_checkpoint(checkpoint, tmp_path / "b", seed=0) / "model.safetensors").read_bytes()
    other = (perturb_checkpoint(checkpoint, tmp_path / "c", seed=1) / "model.safetensors").read_bytes()
    assert one == two and one != other


def test_every_rope_base_moves_and_nothing_else(checkpoint: Path, tmp_path: Path) -> None:
    out = perturb_checkpoint(checkpoint, tmp_path / "p")
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    assert config["rope_parameters"]["rope_theta"] == pytest.approx(10000.0 * ROPE_FACTOR)
    assert config["text_config"]["rope_parameters"]["full_attention"]["rope_theta"] == pytest.approx(1e6 * ROPE_FACTOR)
    assert config["compress_rope_theta"] == pytest.approx(160000 * ROPE_FACTOR)
    assert config["rms_norm_eps"] == CONFIG["rms_norm_eps"] and config["model_type"] == "toy"
    assert (out / "tokenizer.json").read_text(encoding="utf-8") == "{}"


def test_parts_of_the_perturbation_can_be_left_out(checkpoint: Path, tmp_path: Path) -> None:
    weights_only = perturb_checkpoint(checkpoint, tmp_path / "w", rope=False)
    assert json.loads((weights_only / "config.json").read_text(encoding="utf-8")) == CONFIG
    rope_only = perturb_checkpoint(checkpoint, tmp_path / "r", weights=False)
    assert (rope_only / "model.safetensors").read_bytes() == (checkpoint / "model.safetensors").read_bytes()


def test_constant_tensors_lists_what_hides_a_swap(checkpoint: Path) -> None:
    """The constants as initialised; not the index table (not floating) nor the clamp bound (not finite)."""
    assert constant_tensors(checkpoint) == [
        "model.layers.0.input_layernorm.weight",
        "model.layers.0.layer_scalar",
        "model.layers.0.post_attention_layernorm.weight",
        "model.layers.0.self_attn.q_proj.bias",
    ]
