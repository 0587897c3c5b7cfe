"""The plugin's face: a light import, ``swiftcore recipes`` listing eagle3, and its refusals."""

from __future__ import annotations

import subprocess
import sys

import pytest
from swiftcore_testing import run_cli


def test_importing_the_plugin_imports_no_heavy_library() -> None:
    code = (
        "import sys, swiftcore_eagle3, swiftcore_eagle3.plugin, swiftcore_eagle3.options, "
        "swiftcore_eagle3.hidden_cache, swiftcore_eagle3.speculative;"
        "print([m for m in ('torch', 'transformers', 'speculators') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_recipes_lists_eagle3() -> None:
    text = run_cli("recipes")
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("eagle3 ") and "swiftcore-plugin-eagle3" in line)
    assert "Eagle3 draft head" in lines[at + 1], text


def test_train_help_shows_the_recipe_options() -> None:
    text = run_cli("train", "--recipe", "eagle3", "--help")
    flags = ("--draft-layers", "--ttt-steps", "--aux-layers", "--draft-vocab-size", "--hidden-states-cache")
    assert all(flag in text for flag in flags), text


@pytest.mark.parametrize("value", ["2,x", "3,3", ""])
def test_bad_aux_layers_are_refused_before_loading(value: str) -> None:
    from swiftcore_eagle3.options import Eagle3Options

    from swiftcore.api import SwiftcoreError

    if value == "":
        assert Eagle3Options(aux_layers=None).aux_layer_ids() is None
        return
    with pytest.raises(SwiftcoreError, match="--aux-layers"):
        Eagle3Options(aux_layers=value)


def test_default_aux_layers() -> None:
    from swiftcore_eagle3.options import default_aux_layers

    assert default_aux_layers(32) == [2, 16, 29]  # speculators' and vLLM's default
    assert default_aux_layers(4) == [1, 2, 3]
