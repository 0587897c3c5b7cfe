"""swiftcore-train's hooks (``swiftcore_train_check``, ``swiftcore_train_setup``): a capability plugin attaches to a
training run without the recipe naming it.

The capability here is a third party's: a ``.py`` file outside this repository, loaded with ``--plugin``, that freezes
the input embeddings through a ``TrainerCallback``. A real tiny run (the real Trainer, a few steps) must leave those
weights bit-identical while the rest of the model trains.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from swiftcore_testing import run_cli

from swiftcore.api import SwiftcoreError, load_plugins

FREEZE_PLUGIN = '''
"""Freeze the input embeddings while everything else trains (a capability plugin of swiftcore-train)."""

from swiftcore.api import SwiftcoreError, hookimpl

SWIFTCORE_API = "1.5"


@hookimpl
def swiftcore_train_check(options, kind):
    if kind != "sft":
        raise SwiftcoreError(f"freeze: only sft runs, not {kind!r}")


@hookimpl
def swiftcore_train_setup(setup):
    from transformers import TrainerCallback  # in the hook: a plugin module stays light to import

    class FreezeEmbeddings(TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kwargs):
            model.get_input_embeddings().requires_grad_(False)

    setup.callbacks.append(FreezeEmbeddings())
'''


def _chats(path: Path) -> Path:
    rows = [
        {"messages": [{"role": "user", "content": f"Count to {n}."},
                      {"role": "assistant", "content": " ".join(str(j) for j in range(1, n + 1))}]}
        for n in (3, 5, 2, 7)
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _weights(directory: Path) -> dict:
    from safetensors.torch import load_file

    weights: dict = {}
    for shard in sorted(directory.glob("*.safetensors")):
        weights.update(load_file(str(shard)))
    return weights


@pytest.fixture
def freeze_plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plugin as a file in a temporary directory, outside the repository's plugin folders."""
    path = tmp_path_factory.mktemp("third_party") / "freeze_embeddings.py"
    path.write_text(FREEZE_PLUGIN)
    return path


def _train(model: Path, data: Path, out: Path, *plugins: str) -> dict:
    """A real 3-step full-tuning run with ``--plugin`` values ``plugins``; the weights of its checkpoint."""
    run_cli("train", *(a for p in plugins for a in ("--plugin", p)), "--model", str(model), "--dataset", str(data),
            "--output-dir", str(out), "--tuner", "full", "--max-steps", "3", "--save-steps", "3", "--batch-size", "2",
            "--learning-rate", "1e-2", "--lr-scheduler", "constant", "--logging-steps", "1", "--no-plot")  # fmt: skip
    return _weights(out / "checkpoint-3")


def test_a_plugin_file_freezes_the_embeddings_of_a_real_run(
    tiny_model_dir, freeze_plugin: Path, tmp_path: Path
) -> None:
    """``--plugin freeze_embeddings.py`` (registered before swiftcore-train, which declares the hooks) freezes the
    embeddings through its callback: bit-identical after 3 full-tuning steps, while the decoder's weights moved; the
    same run without the plugin moves them."""
    import torch

    model, data = tiny_model_dir("qwen3_5"), _chats(tmp_path / "chats.jsonl")
    before = _weights(model)
    frozen = _train(model, data, tmp_path / "frozen", str(freeze_plugin), "qwen3_5")
    plain = _train(model, data, tmp_path / "plain", "qwen3_5")
    embeddings = [name for name in frozen if name.endswith("embed_tokens.weight")]
    assert embeddings, sorted(frozen)
    for name in embeddings:
        assert torch.equal(frozen[name], before[name].to(frozen[name].dtype)), f"{name} moved"
        assert not torch.equal(plain[name], before[name].to(plain[name].dtype)), f"{name} never moves here"
    moved = [n for n in frozen if n in before and n not in embeddings and not torch.equal(frozen[n], before[n])]
    assert any(".layers." in n for n in moved), "the rest of the model did not train"


def test_the_check_hook_refuses_before_anything_loads(freeze_plugin: Path, tmp_path: Path) -> None:
    """``swiftcore_train_check`` runs before the model loads and the output directory is made: the plugin refuses a
    head task there, with its own message."""
    from swiftcore_train.config import TrainConfig
    from swiftcore_train.hooks import check_training

    plugins = load_plugins([str(freeze_plugin), "train"], env={})
    cfg = TrainConfig(model=str(tmp_path / "model"), dataset=("d.jsonl",), output_dir=str(tmp_path / "out"))
    check_training(plugins, cfg, {}, kind="sft")
    with pytest.raises(SwiftcoreError, match="freeze: only sft runs, not 'embedding'"):
        check_training(plugins, cfg, {}, kind="embedding")


def test_without_the_declaring_plugin_the_capability_is_refused_with_what_to_load(freeze_plugin: Path) -> None:
    """The hooks are swiftcore-train's: with it left out, the capability's hooks are unknown, and the message names
    the plugin, its hooks and what to do; auto-loaded (swiftcore-train blocked), it is skipped with that warning."""
    message = r"freeze_embeddings.*unknown hook\(s\) swiftcore_train_check, swiftcore_train_setup.*--plugin NAME"
    with pytest.raises(SwiftcoreError, match=message):
        load_plugins([str(freeze_plugin)], env={})
    plugins = load_plugins(["no:train"], env={})  # every installed plugin; sequence_parallel implements the hooks
    assert plugins.infos["sequence_parallel"].status == "failed"
    assert "unknown hook(s) swiftcore_train_check" in plugins.infos["sequence_parallel"].error


def test_sequence_parallel_attaches_through_the_hooks_and_train_names_no_capability() -> None:
    """swiftcore-sequence-parallel implements the hooks (it registers before swiftcore-train, which declares them);
    neither swiftcore-train nor swiftcore-heads imports it."""
    import subprocess
    import sys

    plugins = load_plugins(["sequence_parallel"], env={})
    assert {"sequence_parallel", "train"} <= plugins.explicit
    for hook in ("swiftcore_train_check", "swiftcore_train_setup"):
        caller = getattr(plugins.pm.hook, hook)
        assert caller.has_spec() and [i.plugin_name for i in caller.get_hookimpls()] == ["sequence_parallel"]
    code = (
        "import sys, swiftcore_train.sft, swiftcore_train.hooks, swiftcore_heads.recipe; "
        "assert 'swiftcore_sequence_parallel' not in sys.modules, 'imported'; "
        "heavy = [m for m in ('torch', 'transformers') if m in sys.modules]; assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
