"""``swiftcore train --recipe eagle3 --hidden-states-cache DIR`` on the tiny Qwen3.5: the draft's loss on a fixed
batch read from the cache equals the loss with the target run on the fly; the target runs once per sample across
several epochs and not at all in a second run (its forwards counted); a damaged cache is rebuilt, deleting only the
files swiftcore wrote, and a directory of someone else's files is refused."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

NAMES = ["Alice", "Bruno", "Chen", "Dara"]


def _records() -> list[dict[str, Any]]:
    return [
        {
            "messages": [
                {"role": "user", "content": f"Greet {n}."},
                {"role": "assistant", "content": f"Hello {n}, welcome!"},
            ]
        }
        for n in NAMES
    ]


@contextmanager
def _target_forwards(class_name: str) -> Iterator[list[int]]:
    """Count the forwards of any module of class ``class_name`` (the target's top module) while inside."""
    import torch

    calls: list[int] = []

    def hook(module: Any, _args: Any) -> None:
        if type(module).__name__ == class_name:
            calls.append(1)

    handle = torch.nn.modules.module.register_module_forward_pre_hook(hook)
    try:
        yield calls
    finally:
        handle.remove()


def test_cached_features_give_the_on_the_fly_loss_exactly(
    tiny_model_dir: Callable[[str], Path], plugins: Any, encoder: Any, tmp_path: Path
) -> None:
    """A fixed batch of the 4 chats: the packed inputs read from the cache are the on-the-fly ones bit for bit, and
    the draft's loss (3 TTT steps) is the same number; the cache's second :meth:`prepare` runs the target 0 times."""
    import torch
    from speculators.losses import resolve_loss_config
    from swiftcore_eagle3.draft import build_draft
    from swiftcore_eagle3.hidden_cache import HiddenStateCache, fingerprint
    from swiftcore_eagle3.recipe import packed_batch

    from swiftcore.api.models import load_model, resolve_model_spec

    model_dir = tiny_model_dir("qwen3_5")
    target = load_model(resolve_model_spec(str(model_dir), plugins), str(model_dir), plugins).eval()
    aux = [1, 2, 3]
    samples = encoder.train_samples(_records(), loss_policy="all_assistant", max_length=256, truncation="error")
    key = fingerprint(model_dir, samples, aux, "float32")
    cache = HiddenStateCache(tmp_path / "cache", key)
    cache.prepare(target, samples, aux)
    assert cache.computed == len(samples)
    again = HiddenStateCache(tmp_path / "cache", key)
    again.prepare(target, samples, aux)
    assert again.computed == 0
    live = packed_batch(target, samples, aux)
    stored = packed_batch(target, samples, aux, [again.read(i, len(s["input_ids"])) for i, s in enumerate(samples)])
    for name, value in live.items():
        assert torch.equal(value, stored[name]), name
    draft = build_draft(target, str(model_dir), aux_layer_ids=aux, seed=0)
    loss_config = resolve_loss_config("kl_div", "eager")
    with torch.no_grad():
        _, loss_live, _ = draft(**live, ttt_steps=3, loss_config=loss_config)
        _, loss_stored, _ = draft(**stored, ttt_steps=3, loss_config=loss_config)
    assert float(loss_live) == float(loss_stored)
    # another dataset (one chat fewer) is another fingerprint
    assert fingerprint(model_dir, samples[:-1], aux, "float32") != key


def _train(model_dir: Path, data: Path, out: Path, cache: Path) -> list[dict[str, Any]]:
    from swiftcore_testing import run_cli

    run_cli(
        "train", "--recipe", "eagle3", "--model", str(model_dir), "--dataset", str(data), "--output-dir", str(out),
        "--max-steps", "6", "--batch-size", "2", "--learning-rate", "1e-3", "--logging-steps", "1", "--no-plot",
        "--seed", "0", "--hidden-states-cache", str(cache),
    )  # fmt: skip
    return [json.loads(line) for line in (out / "logs.jsonl").read_text().splitlines()]


def test_train_reuses_the_cache_and_rebuilds_a_damaged_one(
    tiny_model_dir: Callable[[str], Path], tmp_path: Path
) -> None:
    """4 chats, batch 2, 6 steps (3 epochs): the first run runs the target 4 times (once per chat, not 12), the
    second 0 times with the same losses; after one cached file is damaged, the third run rebuilds (4 target runs,
    the same losses) and leaves a file of the user's in the cache directory alone; a directory without the
    manifest but with files is refused, naming the option."""
    model_dir = tiny_model_dir("qwen3_5")
    data = tmp_path / "chats.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _records()))
    cache = tmp_path / "cache"
    target_class = json.loads((model_dir / "config.json").read_text())["architectures"][0]
    with _target_forwards(target_class) as calls:
        first = _train(model_dir, data, tmp_path / "run1", cache)
    assert len(calls) == 4
    with _target_forwards(target_class) as calls:
        second = _train(model_dir, data, tmp_path / "run2", cache)
    assert calls == []
    assert [r["loss"] for r in second] == [r["loss"] for r in first]

    (root,) = [p for p in cache.iterdir() if p.is_dir()]
    sample = sorted(root.glob("sample-*.safetensors"))[0]
    sample.write_bytes(sample.read_bytes()[:-40])  # truncated
    (root / "my-notes.txt").write_text("mine")
    with _target_forwards(target_class) as calls:
        third = _train(model_dir, data, tmp_path / "run3", cache)
    assert len(calls) == 4
    assert [r["loss"] for r in third] == [r["loss"] for r in first]
    assert (root / "my-notes.txt").read_text() == "mine"

    (root / "swiftcore_hidden_states.json").unlink()
    with pytest.raises(pytest.fail.Exception, match="no swiftcore_hidden_states.json, so swiftcore did not write"):
        _train(model_dir, data, tmp_path / "run4", cache)
    assert (root / "my-notes.txt").exists() and sample.exists()
