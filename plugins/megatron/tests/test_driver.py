"""The conversion driver with a toy bridge (no megatron needed): streaming, sharding, atomic output, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from swiftcore_megatron import CheckpointError, MappingError, MegatronBridge
from swiftcore_megatron.checkpoint import HFReader, rank_file, read_metadata
from swiftcore_megatron.convert import hf_to_mcore, load_mcore_state, mcore_to_hf
from swiftcore_megatron.mapping import COLUMN, QKV, ROW, Concat, Rule, Shard


class ToyBridge(MegatronBridge):
    """Embedding, one attention block, 4 experts: enough to exercise every rule kind."""

    model_types = ("toy",)

    def num_experts(self) -> int:
        return 4

    def rules(self) -> list[Rule]:
        rules = [
            Rule("embedding.weight", ("embed.weight",), shard=COLUMN),
            Rule("qkv.weight", ("q.weight", "k.weight", "v.weight"), QKV(4, 2, 2), COLUMN),
            Rule("proj.weight", ("o.weight",), shard=ROW),
            Rule("norm.weight", ("norm.weight",)),
        ]
        for j in range(4):
            rules.append(
                Rule("experts.{expert}.fc1.weight", (f"e.{j}.gate", f"e.{j}.up"), Concat(2), Shard(0, 2), expert=j)
            )
        return rules


def _toy_checkpoint(root: Path, *, shards: int = 1) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    tensors = {
        "embed.weight": torch.randn(8, 6),
        "q.weight": torch.randn(8, 6),
        "k.weight": torch.randn(4, 6),
        "v.weight": torch.randn(4, 6),
        "o.weight": torch.randn(6, 8),
        "norm.weight": torch.randn(6),
        **{f"e.{j}.{p}": torch.randn(4, 6) for j in range(4) for p in ("gate", "up")},
    }
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps({"model_type": "toy"}))
    (root / "tokenizer_config.json").write_text("{}")
    keys = list(tensors)
    if shards == 1:
        save_file(tensors, str(root / "model.safetensors"))
    else:
        weight_map = {}
        for s in range(shards):
            name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            part = {k: tensors[k] for k in keys[s::shards]}
            save_file(part, str(root / name))
            weight_map.update(dict.fromkeys(part, name))
        (root / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return tensors


@pytest.mark.parametrize(("tp", "ep", "shards"), [(1, 1, 1), (2, 1, 3), (2, 2, 2), (1, 4, 1)])
def test_toy_round_trip(tmp_path: Path, tp: int, ep: int, shards: int) -> None:
    tensors = _toy_checkpoint(tmp_path / "hf", shards=shards)
    bridge = ToyBridge({"model_type": "toy"})
    result = hf_to_mcore(tmp_path / "hf", tmp_path / "mc", bridge, tp=tp, ep=ep, bridge_name="toy")
    assert len(result.files) == tp * ep
    meta = read_metadata(tmp_path / "mc")
    assert (meta["tp"], meta["ep"], meta["bridge"], meta["dtype"]) == (tp, ep, "toy", "float32")
    assert (tmp_path / "mc" / "hf" / "tokenizer_config.json").is_file()
    assert not (tmp_path / "mc" / "hf" / "model.safetensors").exists()
    rank0 = torch.load(rank_file(tmp_path / "mc", 0, 0, ep), weights_only=True)["model"]
    assert rank0["qkv.weight"].shape[0] == 16 // tp
    assert sum(k.startswith("experts.") for k in rank0) == 4 // ep
    mcore_to_hf(tmp_path / "mc", tmp_path / "back", bridge, max_shard_bytes=200)
    back = {}
    for f in (tmp_path / "back").glob("*.safetensors"):
        back.update(load_file(f))
    assert sorted(back) == sorted(tensors)
    assert all(torch.equal(back[k], v) for k, v in tensors.items())
    assert (tmp_path / "back" / "tokenizer_config.json").is_file()
    assert (tmp_path / "back" / "model.safetensors.index.json").is_file()  # 200-byte shards: several files
    assert load_mcore_state(tmp_path / "mc", bridge).keys() == load_mcore_state(tmp_path / "mc", bridge, tp=2).keys()
    # Each rank file stores only its own shards: the rank files together hold the model's bytes once (the fused
    # tensors written without a copy must not drag the other ranks' slices of their storage along).
    def stored(key: str, t: torch.Tensor) -> int:  # dense: on every EP rank; replicated: on every TP rank
        copies = 1 if key.startswith("e.") else ep * (tp if key == "norm.weight" else 1)
        return t.numel() * t.element_size() * copies

    assert result.bytes == sum(stored(k, t) for k, t in tensors.items())
    assert sum(rank_file(tmp_path / "mc", r, e, ep).stat().st_size for r in range(tp) for e in range(ep)) < (
        result.bytes + 4096 * tp * ep
    )  # the files hold those bytes and a little pickle and zip structure


def test_failure_midway_leaves_no_output_and_no_temporary(tmp_path: Path) -> None:
    _toy_checkpoint(tmp_path / "hf")

    class Broken(ToyBridge):
        def rules(self) -> list[Rule]:  # the last rule's tensors do not fit its fuse
            return [*super().rules(), Rule("bad.weight", ("q.weight", "k.weight"), Concat(2))]

    with pytest.raises(CheckpointError, match="q.weight, k.weight are used by more than one rule|k.weight, q.weight"):
        hf_to_mcore(tmp_path / "hf", tmp_path / "mc", Broken({"model_type": "toy"}))

    class Exploding(Concat):
        def to_mcore(self, tensors):  # type: ignore[no-untyped-def]
            raise MappingError("boom")

    class BrokenLate(ToyBridge):
        def rules(self) -> list[Rule]:  # expert 3 lives on ep rank 1: rank 0's file is already written
            rules = super().rules()
            rules[-1] = Rule("experts.{expert}.fc1.weight", ("e.3.gate", "e.3.up"), Exploding(2), expert=3)
            return rules

    with pytest.raises(MappingError, match="boom"):
        hf_to_mcore(tmp_path / "hf", tmp_path / "mc", BrokenLate({"model_type": "toy"}), ep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]


def test_missing_shard_in_index_is_named(tmp_path: Path) -> None:
    _toy_checkpoint(tmp_path / "hf", shards=3)
    (tmp_path / "hf" / "model-00002-of-00003.safetensors").unlink()
    with pytest.raises(CheckpointError, match="model-00002-of-00003.safetensors is missing"):
        HFReader(tmp_path / "hf")


def test_directory_without_weights_is_refused(tmp_path: Path) -> None:
    (tmp_path / "hf").mkdir()
    with pytest.raises(CheckpointError, match="holds no model.safetensors"):
        HFReader(tmp_path / "hf")


def test_to_hf_refuses_a_directory_that_is_not_a_converted_checkpoint(tmp_path: Path) -> None:
    _toy_checkpoint(tmp_path / "hf")
    with pytest.raises(CheckpointError, match="swiftcore_mcore.json not found"):
        mcore_to_hf(tmp_path / "hf", tmp_path / "back", ToyBridge({"model_type": "toy"}))
    assert not (tmp_path / "back").exists()


def test_to_hf_refuses_tensors_no_rule_maps(tmp_path: Path) -> None:
    _toy_checkpoint(tmp_path / "hf")
    bridge = ToyBridge({"model_type": "toy"})
    hf_to_mcore(tmp_path / "hf", tmp_path / "mc", bridge)
    path = rank_file(tmp_path / "mc", 0, 0, 1)
    state = torch.load(path, weights_only=True)
    state["model"]["stray.weight"] = torch.zeros(1)
    torch.save(state, path)
    with pytest.raises(CheckpointError, match="stray.weight"):
        mcore_to_hf(tmp_path / "mc", tmp_path / "back", bridge)
    assert not (tmp_path / "back").exists()
