"""Recipes are a plugin kind: a distribution outside the repository's plugin folders adds a recipe and its options.

``tests/fixtures/recipe_toy`` is a third-party recipe written against ``swiftcore.api`` alone. Loaded by
``--plugin`` (as a dotted module on ``PYTHONPATH``, the way an installed distribution's module is found), it
adds ``swiftcore train --recipe toy`` with its own ``--toy-scale``/``--toy-label``, without any change to core:

- the recipe runs, and receives its options (flags and ``--config`` keys alike) in its config dataclass;
- its options are refused with another recipe, and a bad value is refused by its config before anything runs;
- ``swiftcore recipes`` and ``swiftcore train --recipe toy --help`` list it and its options;
- a plugin option that clashes with a core option is refused naming both owners;
- an unknown recipe gets close matches.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from swiftcore_testing import run_swiftcore

TOY = Path(__file__).parent / "fixtures" / "recipe_toy"
PLUGIN = ("--plugin", "swiftcore_recipe_toy")


def _swiftcore(*args: str, tmp_path: Path, extra_path: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWIFTCORE_")}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (TOY, extra_path) if p)
    return run_swiftcore(*args, cwd=tmp_path, env=env)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "data.jsonl"
    row = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    path.write_text("\n".join(json.dumps(row) for _ in range(3)) + "\n")
    return path


def test_a_plugin_recipe_runs_with_its_own_options(tmp_path: Path, data: Path) -> None:
    out = tmp_path / "out"
    proc = _swiftcore(
        "train", *PLUGIN, "--recipe", "toy", "--model", "unused", "--dataset", str(data),
        "--toy-scale", "2.5", "--output-dir", str(out), tmp_path=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads((out / "toy.json").read_text()) == {"rows": 7.5, "recipe": "toy"}


def test_recipe_options_come_from_a_config_file_too(tmp_path: Path, data: Path) -> None:
    out = tmp_path / "out"
    config = tmp_path / "toy.yaml"
    config.write_text(f"recipe: toy\ntoy-scale: 4\ntoy_label: n\nmodel: unused\ndataset: [{data}]\noutput_dir: {out}\n")
    proc = _swiftcore("train", *PLUGIN, "--config", str(config), tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((out / "toy.json").read_text()) == {"n": 12.0, "recipe": "toy"}


def test_an_option_of_another_recipe_is_refused_naming_its_recipe(tmp_path: Path, data: Path) -> None:
    out = tmp_path / "out"
    proc = _swiftcore(
        "train", *PLUGIN, "--model", "unused", "--dataset", str(data), "--toy-scale", "2", "--output-dir", str(out),
        tmp_path=tmp_path,
    )
    assert proc.returncode == 2
    assert "--toy-scale belongs to recipe 'toy'" in proc.stderr and "--recipe sft" in proc.stderr
    assert not out.exists()


def test_a_bad_option_value_is_refused_by_the_recipe_config_before_anything_runs(tmp_path: Path, data: Path) -> None:
    out = tmp_path / "out"
    proc = _swiftcore(
        "train", *PLUGIN, "--recipe", "toy", "--model", "unused", "--dataset", str(data), "--toy-scale", "-1",
        "--output-dir", str(out), tmp_path=tmp_path,
    )
    assert proc.returncode == 2
    assert "recipe 'toy'" in proc.stderr and "--toy-scale must be positive" in proc.stderr
    assert not out.exists()


def test_recipes_and_help_list_the_recipe_and_its_options(tmp_path: Path) -> None:
    listed = _swiftcore("recipes", *PLUGIN, "--json", tmp_path=tmp_path)
    assert listed.returncode == 0, listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert set(rows) == {"toy"}  # the chosen plugin set only: sft is the swiftcore-train plugin's, not loaded
    assert [o["flags"] for o in rows["toy"]["options"]] == [["--toy-scale"], ["--toy-label"]]
    assert "swiftcore_recipe_toy" in rows["toy"]["provider"]
    helped = _swiftcore("train", *PLUGIN, "--recipe", "toy", "--help", tmp_path=tmp_path)
    assert helped.returncode == 0, helped.stderr
    assert "--toy-scale" in helped.stdout and "[recipe toy]" in helped.stdout
    # The help shows the chosen recipe's options (issue 53): sft's run does not list toy's.
    assert "--toy-scale" not in _swiftcore("train", *PLUGIN, "--help", tmp_path=tmp_path).stdout
    without = _swiftcore("train", "--plugin", "no:swiftcore_recipe_toy", "--help", tmp_path=tmp_path)
    assert "--toy-scale" not in without.stdout


def test_an_unknown_recipe_gets_close_matches(tmp_path: Path, data: Path) -> None:
    proc = _swiftcore(
        "train", *PLUGIN, "--recipe", "tyo", "--model", "unused", "--dataset", str(data),
        "--output-dir", str(tmp_path / "out"), tmp_path=tmp_path,
    )
    assert proc.returncode == 2
    assert "no loaded plugin provides a recipe called 'tyo'" in proc.stderr and "Did you mean: toy" in proc.stderr


def test_a_plugin_option_clashing_with_a_core_option_is_refused(tmp_path: Path, data: Path) -> None:
    clash = tmp_path / "plugins"
    clash.mkdir()
    (clash / "swiftcore_clash.py").write_text(
        'SWIFTCORE_API = "1.1"\n'
        "from swiftcore.api import hookimpl\n\n"
        "@hookimpl\n"
        "def swiftcore_addoption(parser):\n"
        '    parser.addoption("--max-steps", type=int, default=3)\n'
    )
    proc = _swiftcore(
        "train", "--plugin", "swiftcore_clash", "--model", "unused", "--dataset", str(data), tmp_path=tmp_path,
        extra_path=clash,
    )
    assert proc.returncode == 2
    assert "plugin 'swiftcore_clash' adds option '--max-steps'" in proc.stderr
    assert "swiftcore train itself already has" in proc.stderr
