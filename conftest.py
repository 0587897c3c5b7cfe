"""Repository-wide pytest set-up: swiftcore's test-kit fixtures, and tiny checkpoints built once per session."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

pytest_plugins = ["swiftcore.testing"]

# Nothing in the test suite may reach a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``tiny_model_dir("qwen3_5")``: a tiny random checkpoint of that model spec, made once per session."""
    made: dict[str, Path] = {}

    def make(name: str) -> Path:
        if name not in made:
            from swiftcore._plugins import load_plugins
            from swiftcore.models import make_tiny

            plugins = load_plugins(env={})
            spec = plugins.registry.get("model", name)
            made[name] = make_tiny(spec, tmp_path_factory.mktemp("tiny") / name, seed=0)
        return made[name]

    return make
