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


#: classification checkpoints record these class names (so label names are checked, not just ids).
LABELS = {0: "negative", 1: "neutral", 2: "positive"}


@pytest.fixture(scope="session")
def head_labels() -> dict[int, str]:
    """The class names of the ``head_checkpoint("classification")`` checkpoint."""
    return dict(LABELS)


@pytest.fixture(scope="session")
def head_checkpoint(
    tiny_model_dir: Callable[[str], Path], plugins: Any, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str], Path]:
    """``head_checkpoint("embedding")``: an untrained head on tiny qwen3_5, saved once per session."""
    made: dict[str, Path] = {}

    def get(task: str) -> Path:
        if task not in made:
            from swiftcore_heads.testing import make_head_checkpoint

            options: dict[str, Any] = {"num_labels": 3, "id2label": LABELS} if task == "classification" else {}
            out = tmp_path_factory.mktemp("heads") / task
            made[task] = make_head_checkpoint(tiny_model_dir("qwen3_5"), task, out, plugins, **options)
        return made[task]

    return get
