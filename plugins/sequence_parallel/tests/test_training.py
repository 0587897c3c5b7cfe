"""Fast checks of the sft wiring: option parsing, refusals, the collator padding, the plugin's import cost."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from swiftcore_sequence_parallel.sharding import shard_batch
from swiftcore_sequence_parallel.testing import sample_batch, tiny_model
from swiftcore_sequence_parallel.training import (
    SequenceParallelOptions,
    check_flags,
    check_model,
    check_world,
    pad_batch_to_multiple,
)

from swiftcore.api import SwiftcoreError


def test_options_defaults_and_aliases() -> None:
    assert SequenceParallelOptions.from_options(None) == SequenceParallelOptions(1, "ulysses", "p2p")
    assert not SequenceParallelOptions.from_options({"eval_every": None}).enabled  # other keys ignored
    opts = SequenceParallelOptions.from_options({"sequence_parallel_size": 2, "sp_mode": "both"})
    assert (opts.size, opts.mode, opts.enabled) == (2, "hybrid", True)
    with pytest.raises(SwiftcoreError, match="--sequence-parallel-size"):
        SequenceParallelOptions.from_options({"sequence_parallel_size": 0})


def test_sft_eval_options_tolerate_the_sp_keys() -> None:
    from swiftcore_train import GenerationEvalOptions

    options = {"sequence_parallel_size": 2, "sp_mode": "ring", "sp_ring_impl": "p2p", "eval_every": None}
    assert not GenerationEvalOptions.from_options(options).enabled


@pytest.mark.parametrize(("world", "size", "hint"), [(1, 2, "torchrun"), (4, 3, "multiple of 3"), (6, 4, "4")])
def test_world_size_must_be_a_multiple(world: int, size: int, hint: str) -> None:
    with pytest.raises(SwiftcoreError, match="--sequence-parallel-size") as info:
        check_world(world, size)
    assert hint in str(info.value)
    check_world(4, 2)  # SP 2 x data parallel 2


def test_media_samples_refused() -> None:
    with pytest.raises(SwiftcoreError, match="image or audio"):
        check_flags(SimpleNamespace(packing=False, padding_free=False), multimodal=True)
    check_flags(SimpleNamespace(packing=True, padding_free=False))  # packing is supported


class _Fake(torch.nn.Module):
    def __init__(self, **config: Any) -> None:
        super().__init__()
        self.config = SimpleNamespace(num_attention_heads=4, **config)
        self.proj = torch.nn.Linear(2, 2)


class FakeGatedDeltaNet(torch.nn.Module):
    pass


def test_model_refusals() -> None:
    ulysses2 = SequenceParallelOptions(2, "ulysses")
    with pytest.raises(SwiftcoreError, match="gated DeltaNet linear-attention"):
        check_model(_Fake(layer_types=["full_attention", "linear_attention"]), ulysses2)
    with pytest.raises(SwiftcoreError, match="'mamba' layers"):
        check_model(_Fake(layer_types=["mamba"]), ulysses2)
    model = _Fake()
    model.mixer = FakeGatedDeltaNet()
    with pytest.raises(SwiftcoreError, match="FakeGatedDeltaNet layers"):
        check_model(model, ulysses2)
    model = _Fake()
    model.sinks = torch.nn.Parameter(torch.zeros(4))
    with pytest.raises(SwiftcoreError, match="sinks"):
        check_model(model, ulysses2)
    with pytest.raises(SwiftcoreError, match="output_router_logits"):
        check_model(_Fake(output_router_logits=True), ulysses2)
    with pytest.raises(SwiftcoreError, match="4 heads.*--sp-mode ring"):
        check_model(_Fake(), SequenceParallelOptions(3, "ulysses"))
    assert check_model(_Fake(), SequenceParallelOptions(3, "ring")) == 4


def test_supported_models_pass() -> None:
    opts = SequenceParallelOptions(2, "ulysses")
    assert check_model(tiny_model("gemma3"), opts) == 4  # full + sliding attention layers
    assert check_model(tiny_model("qwen3"), opts) == 4


def _loss(model: Any, batch: dict[str, Any]) -> float:
    with torch.no_grad():
        out = model(**{k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "position_ids")})
    labels = shard_batch(batch, 0, 1)["shift_labels"]
    return float(torch.nn.functional.cross_entropy(out.logits.flatten(0, 1), labels.flatten(), ignore_index=-100))


@pytest.mark.parametrize("kind", ["padded", "packed"])
def test_padding_to_a_multiple_keeps_the_loss(kind: str) -> None:
    model = tiny_model("qwen3")
    batch = sample_batch(kind, seq=13)
    if kind == "packed":
        batch["seq_lens"] = torch.tensor([5, 7, 1], dtype=torch.int32)
        batch["cu_seq_lens_q"] = torch.tensor([0, 5, 12, 13], dtype=torch.int32)
        batch["max_length_q"] = 7
    before = _loss(model, batch)
    padded = pad_batch_to_multiple(dict(batch), 4, pad_token_id=0)
    assert padded["input_ids"].shape[1] == 16
    assert (padded["labels"][:, 13:] == -100).all()
    if kind == "packed":
        assert padded["position_ids"][0, 13:].tolist() == [0, 1, 2]  # a dummy sample of its own
        assert padded["seq_lens"].tolist() == [5, 7, 1, 3] and padded["cu_seq_lens_q"].tolist()[-1] == 16
    else:
        assert (padded["attention_mask"][:, 13:] == 0).all()
    assert _loss(model, padded) == pytest.approx(before, rel=1e-6)
    shard_batch(padded, 1, 4)  # divisible now
    assert pad_batch_to_multiple(padded, 4, 0)["input_ids"].shape[1] == 16  # already a multiple: unchanged


def test_plugin_module_imports_no_torch() -> None:
    code = (
        "import sys, swiftcore_sequence_parallel.plugin as p; "
        "assert p.SWIFTCORE_API; "
        "bad = [m for m in ('torch', 'transformers') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
