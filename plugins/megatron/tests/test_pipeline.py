"""Pipeline stages: the whole model's tensor names to a stage's and back, block specs cut to a stage, and
checkpoints saved as stage files read back as the whole model."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from swiftcore_megatron import COLUMN, CheckpointError, MegatronBridge, Rule
from swiftcore_megatron.checkpoint import METADATA_FILE, rank_file, read_metadata
from swiftcore_megatron.convert import hf_to_mcore, mcore_to_hf
from swiftcore_megatron.pipeline import Stage, stages

LAYERS = 4


class LayeredBridge(MegatronBridge):
    """An embedding, four layers of two tensors, a final norm and (untied) a head."""

    model_types = ("layered",)

    def rules(self) -> list[Rule]:
        rules = [Rule("embedding.word_embeddings.weight", ("embed.weight",), shard=COLUMN)]
        for i in range(LAYERS):
            rules.append(Rule(f"decoder.layers.{i}.mlp.linear_fc1.weight", (f"layers.{i}.up.weight",), shard=COLUMN))
            rules.append(Rule(f"decoder.layers.{i}.input_layernorm.weight", (f"layers.{i}.norm.weight",)))
        rules.append(Rule("decoder.final_layernorm.weight", ("norm.weight",)))
        if not self.config.get("tie_word_embeddings"):
            rules.append(Rule("output_layer.weight", ("lm_head.weight",), shard=COLUMN))
        return rules

    def model_kwargs(self) -> dict:
        return {"share_embeddings_and_output_weights": bool(self.config.get("tie_word_embeddings"))}


def test_a_stage_holds_its_layers_under_local_names_and_maps_them_back() -> None:
    first, last = Stage(0, 2, LAYERS), Stage(1, 2, LAYERS)
    assert (first.layers, last.layers) == (range(0, 2), range(2, 4))
    assert first.local_keys("decoder.layers.1.mlp.linear_fc1.weight") == ["decoder.layers.1.mlp.linear_fc1.weight"]
    assert last.local_keys("decoder.layers.1.mlp.linear_fc1.weight") == []
    assert last.local_keys("decoder.layers.3.input_layernorm.weight") == ["decoder.layers.1.input_layernorm.weight"]
    assert last.global_key("decoder.layers.1.input_layernorm.weight") == "decoder.layers.3.input_layernorm.weight"
    assert first.local_keys("embedding.word_embeddings.weight") == ["embedding.word_embeddings.weight"]
    assert last.local_keys("embedding.word_embeddings.weight") == []
    for key in ("decoder.final_layernorm.weight", "output_layer.weight"):
        assert (first.local_keys(key), last.local_keys(key)) == ([], [key])
        assert last.global_key(key) == key
    assert Stage(0, 1, LAYERS).local_keys("decoder.layers.3.x") == ["decoder.layers.3.x"]


def test_a_tied_head_is_the_embedding_again_on_the_last_stage() -> None:
    first, middle, last = (Stage(r, 3, 6, tied=True) for r in range(3))
    assert first.local_keys("embedding.word_embeddings.weight") == ["embedding.word_embeddings.weight"]
    assert middle.local_keys("embedding.word_embeddings.weight") == []
    assert last.local_keys("embedding.word_embeddings.weight") == ["output_layer.weight"]
    assert last.global_key("output_layer.weight") is None  # the first stage's embedding is the one kept
    alone = Stage(0, 1, 6, tied=True)
    assert alone.local_keys("embedding.word_embeddings.weight") == ["embedding.word_embeddings.weight"]


@dataclass
class _Block:  # the shape of megatron's TransformerBlockSubmodules
    layer_specs: list
    layer_norm: object = None


@dataclass
class _ModuleSpec:  # the shape of a ModuleSpec wrapping a block
    module: object
    submodules: object


def test_a_per_layer_block_spec_is_cut_to_the_stage() -> None:
    block = _Block(layer_specs=["delta", "delta", "delta", "attention"], layer_norm="norm")
    assert Stage(1, 2, LAYERS).block_spec(block) == _Block(["delta", "attention"], "norm")
    assert Stage(0, 2, LAYERS).block_spec(_ModuleSpec("block", block)).submodules.layer_specs == ["delta", "delta"]
    assert Stage(0, 1, LAYERS).block_spec(block) is block
    already_cut = _Block(["delta", "delta"])  # megatron's get_gpt_decoder_block_spec cuts to the stage itself
    assert Stage(0, 2, LAYERS).block_spec(already_cut) is already_cut
    assert Stage(0, 2, LAYERS).block_spec("one layer spec") == "one layer spec"
    with pytest.raises(ValueError, match="a block spec of 3 layers for a model of 4"):
        Stage(0, 2, LAYERS).block_spec(_Block(["a", "b", "c"]))


def _checkpoint(root: Path, tied: bool) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    tensors = {"embed.weight": torch.randn(8, 6), "norm.weight": torch.randn(6)}
    for i in range(LAYERS):
        tensors[f"layers.{i}.up.weight"] = torch.randn(4, 6)
        tensors[f"layers.{i}.norm.weight"] = torch.randn(6)
    if not tied:
        tensors["lm_head.weight"] = torch.randn(8, 6)
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps({"model_type": "layered", "tie_word_embeddings": tied}))
    save_file(tensors, str(root / "model.safetensors"))
    return tensors


def _as_stage_files(mcore: Path, bridge: MegatronBridge, tp: int, pp: int) -> None:
    """Rewrite a converted checkpoint's rank files as a pipeline run saves them: a file per stage, local names."""
    for tp_rank in range(tp):
        whole = torch.load(rank_file(mcore, tp_rank, 0, 1), weights_only=True)
        for stage in stages(bridge, pp):
            local = {name: t for key, t in whole["model"].items() for name in stage.local_keys(key)}
            path = rank_file(mcore, tp_rank, 0, 1, pp_rank=stage.rank, pp=pp)
            path.parent.mkdir(parents=True)
            torch.save({**whole, "model": local}, path)
        shutil.rmtree(rank_file(mcore, tp_rank, 0, 1).parent)
    meta = json.loads((mcore / METADATA_FILE).read_text())
    (mcore / METADATA_FILE).write_text(json.dumps({**meta, "pp": pp}))


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_stage_files_convert_back_to_the_whole_hf_model(tmp_path: Path, tied: bool) -> None:
    tensors = _checkpoint(tmp_path / "hf", tied)
    bridge = LayeredBridge({"model_type": "layered", "tie_word_embeddings": tied})
    hf_to_mcore(tmp_path / "hf", tmp_path / "mc", bridge, tp=2, bridge_name="layered")
    _as_stage_files(tmp_path / "mc", bridge, tp=2, pp=2)
    names = sorted(p.name for p in (tmp_path / "mc" / "release").iterdir())
    assert names == ["mp_rank_00_000", "mp_rank_00_001", "mp_rank_01_000", "mp_rank_01_001"]
    last = torch.load(rank_file(tmp_path / "mc", 0, 0, 1, pp_rank=1, pp=2), weights_only=True)["model"]
    assert "decoder.layers.0.mlp.linear_fc1.weight" in last and "decoder.layers.2.mlp.linear_fc1.weight" not in last
    assert "output_layer.weight" in last and "embedding.word_embeddings.weight" not in last
    mcore_to_hf(tmp_path / "mc", tmp_path / "back", bridge)
    back = load_file(str(tmp_path / "back" / "model.safetensors"))
    assert sorted(back) == sorted(tensors)
    for key, tensor in tensors.items():
        assert torch.equal(back[key], tensor), key


def test_a_missing_stage_file_is_named(tmp_path: Path) -> None:
    _checkpoint(tmp_path / "hf", tied=False)
    bridge = LayeredBridge({"model_type": "layered"})
    hf_to_mcore(tmp_path / "hf", tmp_path / "mc", bridge, bridge_name="layered")
    _as_stage_files(tmp_path / "mc", bridge, tp=1, pp=2)
    rank_file(tmp_path / "mc", 0, 0, 1, pp_rank=1, pp=2).unlink()
    with pytest.raises(CheckpointError, match=r"mp_rank_00_001/model_optim_rng.pt is missing.*pp=2"):
        read_metadata(tmp_path / "mc")
