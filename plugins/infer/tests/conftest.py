"""Fixtures for the inference tests: a tiny Qwen3, its engine, and a LoRA adapter trained by swiftcore."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def infer_plugins() -> Any:
    """Every installed plugin plus the tiny_qwen3 spec and the built-in backends."""
    from swiftcore_testing import plugins_with_tiny_qwen3

    return plugins_with_tiny_qwen3()


@pytest.fixture(scope="session")
def tiny_qwen3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Qwen3 checkpoint (tied embeddings, head_dim 32)."""
    from swiftcore_testing import make_tiny_qwen3

    return make_tiny_qwen3(tmp_path_factory.mktemp("infer") / "tiny-qwen3")


@pytest.fixture(scope="session")
def engine(tiny_qwen3: Path, infer_plugins: Any) -> Any:
    """One transformers engine for the whole session (tests must not change its weights)."""
    from swiftcore_infer.transformers_engine import TransformersEngine

    return TransformersEngine(tiny_qwen3, infer_plugins)


@pytest.fixture(scope="session")
def trained_lora(tiny_qwen3: Path, infer_plugins: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A LoRA adapter trained by ``swiftcore train``'s code for a few steps (its B matrices are non-zero)."""
    from swiftcore_testing import train_tiny_lora

    return train_tiny_lora(tiny_qwen3, tmp_path_factory.mktemp("lora"), infer_plugins)
