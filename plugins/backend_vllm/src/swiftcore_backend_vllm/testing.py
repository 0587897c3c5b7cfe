"""Test helpers: one tiny Qwen3, one trained LoRA adapter and one in-process vLLM engine per test process.

Starting vLLM takes tens of seconds on a CPU, so every test module that needs it shares the engine
built here (the backend's own tests and the deploy tests alike). Tests that change its weights put them
back before they finish.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = ["VllmSetup", "shared_setup"]


@dataclass
class VllmSetup:
    """What :func:`shared_setup` built.

    Attributes:
        plugins: every installed plugin plus the ``tiny_qwen3`` spec and the built-in backends.
        model_dir: the tiny Qwen3 checkpoint (float32, tied embeddings).
        lora_dir: a LoRA adapter trained on it by ``swiftcore train``'s code.
        work_dir: a scratch directory that lives as long as the process.
        engine: the vLLM engine (generate runner, LoRA enabled, in-process; a pooling instance for
            embeddings starts on the first ``embed``).
    """

    plugins: PluginSet
    model_dir: Path
    lora_dir: Path
    work_dir: Path
    engine: Any


@lru_cache(maxsize=1)
def shared_setup() -> VllmSetup:
    """Build (once per process) the tiny model, its adapter and the vLLM engine; closed at exit."""
    from swiftcore_testing import make_tiny_qwen3, plugins_with_tiny_qwen3, train_tiny_lora

    from swiftcore_backend_vllm.engine import VllmEngine

    work = Path(tempfile.mkdtemp(prefix="swiftcore-vllm-test-"))
    atexit.register(shutil.rmtree, work, True)
    plugins = plugins_with_tiny_qwen3()
    model_dir = make_tiny_qwen3(work / "tiny-qwen3")
    lora_dir = train_tiny_lora(model_dir, work / "lora", plugins)
    engine = VllmEngine(model_dir, plugins, dtype="float32", max_model_len=1024, max_lora_rank=8, embeddings=True)
    atexit.register(engine.close)
    return VllmSetup(plugins, model_dir, lora_dir, work, engine)
