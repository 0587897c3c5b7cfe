"""The plugin registers its four heads, from metadata and through the hook, without importing torch."""

from __future__ import annotations

import subprocess
import sys

from swiftcore.specs import HEAD_TASKS


def test_every_head_task_is_registered(plugins):
    for task in HEAD_TASKS:
        spec = plugins.registry.get("head", task)
        assert spec.task == task
        assert spec.provider.plugin == "heads"
        assert spec.factory == "swiftcore_heads.factory:build_head"
        assert spec.recipe == "swiftcore_heads.recipe:run_head_training"
        assert spec.predictor == "swiftcore_heads.predictor:load_predictor"


def test_importing_the_plugin_does_not_import_torch():
    code = (
        "import sys, swiftcore_heads.plugin, swiftcore_heads\n"
        "bad = [m for m in ('torch', 'transformers', 'megatron') if m in sys.modules]\n"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_static_index_names_every_head():
    from importlib.metadata import entry_points

    names = {ep.name for ep in entry_points(group="swiftcore.heads") if ep.value == "swiftcore_heads.plugin"}
    assert names == set(HEAD_TASKS)


def test_the_head_options_belong_to_the_head_recipes(tmp_path) -> None:
    """``--num-labels`` and friends come from this plugin (``swiftcore_addoption``), not from the core: listed
    under the head recipes, refused with ``--recipe sft`` before anything is written."""
    import json

    from click.testing import CliRunner

    from swiftcore.cli.main import cli

    env = {"SWIFTCORE_PLUGINS": "heads,train", "SWIFTCORE_PLUGINS_STRICT": None}  # train: the sft recipe's plugin
    listed = CliRunner().invoke(cli, ["recipes", "--json"], env=env)
    assert listed.exit_code == 0, listed.output
    rows = {row["name"]: row for row in json.loads(listed.output)}
    flags = [o["flags"][0] for o in rows["embedding"]["options"]]
    sft_flags = {o["flags"][0] for o in rows["sft"]["options"]}  # sft's own (evaluation during training)
    assert "--mrl-dims" in flags and "--num-labels" in flags and not sft_flags & {"--mrl-dims", "--num-labels"}
    out = tmp_path / "out"
    refused = CliRunner().invoke(
        cli, ["train", "--model", "m", "--dataset", "d.jsonl", "--mrl-dims", "16", "--output-dir", str(out)], env=env
    )
    assert refused.exit_code == 2
    assert "--mrl-dims belongs to recipe 'classification' or 'embedding'" in refused.output
    assert not out.exists()
