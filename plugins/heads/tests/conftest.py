"""Fixtures of swiftcore-heads' tests: head models on the tiny backbones, built once per session."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

BACKBONES = ("qwen3_5", "gemma4")


@pytest.fixture(scope="session")
def plugins() -> Any:
    """The installed plugins (no SWIFTCORE_PLUGINS from the environment)."""
    import swiftcore

    return swiftcore.load_plugins(env={})


@pytest.fixture(scope="session")
def backbone(tiny_model_dir: Callable[[str], Path], plugins: Any) -> Callable[[str], tuple[Any, Any, Any, Path]]:
    """``backbone("gemma4")`` -> ``(full model, spec, tokenizer, model_dir)``, loaded once per session."""
    loaded: dict[str, tuple[Any, Any, Any, Path]] = {}

    def get(name: str) -> tuple[Any, Any, Any, Path]:
        if name not in loaded:
            from swiftcore.models import load_model, load_tokenizer, resolve_model_spec

            model_dir = tiny_model_dir(name)
            spec = resolve_model_spec(str(model_dir), plugins)
            model = load_model(spec, model_dir, plugins).eval()
            loaded[name] = (model, spec, load_tokenizer(model_dir), model_dir)
        return loaded[name]

    return get
