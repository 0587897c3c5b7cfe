"""The demo's default model comes from the plugins (``ModelSpec.demo``), not from a family named in core."""

from __future__ import annotations

import pytest
from swiftcore_tiny.demo import demo_model

from swiftcore.errors import SwiftcoreError
from swiftcore.specs import ModelSpec


class _Registry:
    def __init__(self, specs: list[ModelSpec]) -> None:
        self.specs = specs

    def all(self, kind: str) -> list[ModelSpec]:
        assert kind == "model"
        return self.specs


class _Plugins:
    def __init__(self, *specs: ModelSpec) -> None:
        self.registry = _Registry(list(specs))


def _spec(name: str, demo: bool = False) -> ModelSpec:
    return ModelSpec(
        name=name, model_types=(name,), model_class="a:b", tiny_config="m:c", tiny_tokenizer="m:t", demo=demo
    )


def test_the_spec_a_plugin_offers_is_the_default() -> None:
    assert demo_model(_Plugins(_spec("alpha"), _spec("beta", demo=True))).name == "beta"


def test_several_offers_pick_the_first_by_name() -> None:
    assert demo_model(_Plugins(_spec("zeta", demo=True), _spec("beta", demo=True))).name == "beta"


def test_no_offer_is_a_clear_error_naming_what_could_be_passed() -> None:
    with pytest.raises(SwiftcoreError, match=r"no installed model plugin offers a demo model.*--model NAME.*alpha"):
        demo_model(_Plugins(_spec("alpha")))


def test_the_installed_plugins_offer_the_demo_model_make_demo_has_always_run() -> None:
    import swiftcore

    # make demo's numbers (README, tests/test_demo.py) were measured on this family: keep it the default.
    assert demo_model(swiftcore.load_plugins()).name == "qwen3_5"


def test_python_m_swiftcore_demo_runs_the_plugins_demo_command() -> None:
    """``make demo`` runs ``python -m swiftcore.demo``: the core hands it to this plugin's ``demo`` command."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "swiftcore.demo", "--help"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: swiftcore demo") and "--steps" in done.stdout and "--tuner" in done.stdout
