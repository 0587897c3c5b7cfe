"""Repository-wide pytest set-up: tiny checkpoints built once per session.

The test-kit's fixtures (``swiftcore_plugins``, ``register_plugin``) come from the installed ``swiftcore-testing``
distribution, a pytest plugin (entry point ``pytest11``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# Nothing in the test suite may reach a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

_PLUGIN_ENV = ("SWIFTCORE_PLUGINS", "SWIFTCORE_PLUGINS_STRICT")


@pytest.fixture(autouse=True)
def _restore_plugin_env() -> Iterator[None]:
    """Undo the plugin set a test exports to ``os.environ``.

    The CLI run in-process (click's CliRunner) writes its resolved plugin set to ``SWIFTCORE_PLUGINS``
    for child processes, and ``monkeypatch.delenv`` of an unset variable records nothing to undo, so
    without this a later test's subprocess would inherit that set.
    """
    saved = {name: os.environ.get(name) for name in _PLUGIN_ENV}
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``tiny_model_dir("qwen3_5")``: a tiny random checkpoint of that model spec, made once per session."""
    made: dict[str, Path] = {}

    def make(name: str) -> Path:
        if name not in made:
            from swiftcore_tiny import make_tiny

            from swiftcore._plugins import load_plugins

            plugins = load_plugins(env={})
            spec = plugins.registry.get("model", name)
            made[name] = make_tiny(spec, tmp_path_factory.mktemp("tiny") / name, seed=0)
        return made[name]

    return make
