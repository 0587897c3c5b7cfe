"""The ``sft`` recipe is this plugin's: registered by its hook, found under a chosen plugin set, light to import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from swiftcore.api import load_plugins
from swiftcore.api.cli import cli


def test_the_plugin_registers_sft() -> None:
    plugins = load_plugins(["train"], env={})
    spec = plugins.registry.get("recipe", "sft")
    assert spec.provider.plugin == "train" and spec.run == "swiftcore_train.sft:run_sft"
    assert spec.tasks == ("causal_lm", "asr")


def test_a_chosen_plugin_set_still_loads_the_recipe_asked_for(tmp_path: Path) -> None:
    """``SWIFTCORE_PLUGINS=template_qwen swiftcore train ...`` runs sft (the recipe's plugin joins the set), as
    ``--plugin`` does: the run gets as far as the missing model, not to 'no plugin provides sft'."""
    data = tmp_path / "d.jsonl"
    data.write_text('{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}\n')
    out = tmp_path / "out"
    args = ["train", "--model", str(tmp_path / "no-model"), "--dataset", str(data), "--output-dir", str(out)]
    for env, extra in (({"SWIFTCORE_PLUGINS": "template_qwen"}, []), ({}, ["--plugin", "template_qwen"])):
        result = CliRunner().invoke(cli, args + extra, env={"SWIFTCORE_PLUGINS_STRICT": None, **env})
        assert result.exit_code != 0
        message = str(result.exception) + result.output
        assert "no-model" in message and "recipe" not in message, message
        assert not out.exists()


def test_without_the_plugin_train_names_what_to_install(tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    result = CliRunner().invoke(
        cli,
        ["train", "--plugin", "no:train", "--model", "m", "--dataset", str(data), "--output-dir", str(tmp_path / "o")],
        env={"SWIFTCORE_PLUGINS": None, "SWIFTCORE_PLUGINS_STRICT": None},
    )
    assert result.exit_code != 0
    message = str(result.exception) + result.output
    assert "--plugin train" in message or "pip install swiftcore-train" in message, message


def test_importing_the_plugin_module_stays_light() -> None:
    code = (
        "import sys, swiftcore_train, swiftcore_train.plugin, swiftcore_train.run, swiftcore_train.output_dir; "
        "heavy = [m for m in ('torch', 'transformers', 'peft') if m in sys.modules]; assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


ENCODER_PLUGIN = '''
from swiftcore.api import ModelSpec, hookimpl

SWIFTCORE_API = "1.3"


@hookimpl
def swiftcore_register_models():
    return [ModelSpec(name="tiny_encoder", model_types=("bert",), model_class="transformers:BertModel",
                      tasks=("embedding",))]
'''


def test_a_recipe_refuses_a_model_it_does_not_train(tmp_path: Path) -> None:
    """``ModelSpec.tasks`` is read: an encoder-only family (tasks: embedding) is refused by ``sft`` before anything
    loads, naming both sides."""
    from swiftcore_train.config import TrainConfig
    from swiftcore_train.dispatch import run_training

    plugin = tmp_path / "encoder_plugin.py"
    plugin.write_text(ENCODER_PLUGIN)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "bert", "architectures": ["BertModel"]}')
    data = tmp_path / "d.jsonl"
    data.write_text('{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}\n')
    plugins = load_plugins(["train", str(plugin)], env={})
    cfg = TrainConfig(model=str(model), dataset=(str(data),), output_dir=str(tmp_path / "out"))
    try:
        run_training(cfg, plugins)
    except Exception as exc:
        message = str(exc)
    else:
        raise AssertionError("sft trained an encoder-only model")
    assert "'tiny_encoder'" in message and "embedding" in message and "recipe 'sft'" in message, message
    assert not (tmp_path / "out").exists()
