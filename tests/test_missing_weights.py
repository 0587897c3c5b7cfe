"""A checkpoint without some of its model's weights is refused, naming them: transformers would fill them with
random values and ``swiftcore train`` / ``infer`` / ``deploy`` would run from them, exit 0, with a warning in a log
at most. Weights tied to others (the output head tied to the embeddings) are not missing."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from swiftcore_testing import run_swiftcore

RECORD = {"messages": [{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "hi"}]}


def _keep_only(model: Path, keep: str) -> tuple[int, int]:
    """Rewrite ``model``'s weights with only the tensors whose name holds ``keep``; (kept, before)."""
    from safetensors.torch import load_file, save_file

    [weights] = model.glob("*.safetensors")
    tensors = load_file(str(weights))
    kept = {name: t for name, t in tensors.items() if keep in name}
    save_file(kept, str(weights), metadata={"format": "pt"})
    return len(kept), len(tensors)


@pytest.fixture
def gutted(tmp_path: Path, tiny_model_dir) -> Path:
    """The tiny Qwen3.5 checkpoint with the token embeddings only (1 of its tensors)."""
    model = tmp_path / "gutted"
    shutil.copytree(tiny_model_dir("qwen3_5"), model)
    kept, before = _keep_only(model, "embed_tokens")
    assert kept == 1 and before > 50
    return model


def test_loading_a_checkpoint_with_missing_weights_names_them(gutted: Path) -> None:
    from swiftcore import load_plugins
    from swiftcore.api.models import load_model, resolve_model_spec
    from swiftcore.errors import SwiftcoreError

    plugins = load_plugins(env={})
    spec = resolve_model_spec(gutted, plugins)
    with pytest.raises(SwiftcoreError, match=r"weight\(s\) of Qwen3_5ForConditionalGeneration are not in") as caught:
        load_model(spec, gutted, plugins)
    message = str(caught.value)
    assert message.startswith(f"{gutted}: 76 weight(s) of ")  # every tensor but the embeddings
    assert "(lm_head.weight, model.language_model.layers.0.input_layernorm.weight, " in message
    assert message.endswith("copy the whole checkpoint (every file model.safetensors.index.json names)")


def test_train_refuses_it_before_any_step(gutted: Path, tmp_path: Path) -> None:
    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps(RECORD) + "\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWIFTCORE_")}
    out = tmp_path / "out"
    command = ["train", "--model", str(gutted), "--dataset", str(data), "--output-dir", str(out), "--max-steps", "1"]
    proc = run_swiftcore(*command, env=env, timeout=600)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "are not in its weight files" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert not (out / "checkpoint-1").exists()


@pytest.mark.parametrize("tied", [True, False], ids=["tied-head", "own-head"])
def test_a_whole_checkpoint_loads_tied_head_or_not(tied: bool, tmp_path: Path) -> None:
    """The tied output head is not in the file, and is not missing."""
    from safetensors import safe_open
    from swiftcore_testing import make_tiny_qwen3, plugins_with_tiny_qwen3

    from swiftcore.api.models import load_model, resolve_model_spec

    model_dir = make_tiny_qwen3(tmp_path / "tiny", tie_word_embeddings=tied)
    with safe_open(str(model_dir / "model.safetensors"), framework="pt") as weights:
        assert ("lm_head.weight" in set(weights.keys())) is not tied
    plugins = plugins_with_tiny_qwen3()
    model = load_model(resolve_model_spec(model_dir, plugins), model_dir, plugins)
    assert (model.lm_head.weight is model.model.embed_tokens.weight) is tied
