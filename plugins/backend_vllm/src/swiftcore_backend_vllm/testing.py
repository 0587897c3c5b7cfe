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


def shared_setup() -> VllmSetup:
    """The tiny model, its adapter and the vLLM engine, built once per process and closed at exit.

    The engine is started again when vLLM's process-wide state is gone: the shutdown of any other in-process engine
    (vLLM's ``EngineCore.shutdown`` runs ``cleanup_dist_env_and_memory``, closed or garbage-collected) destroys the
    parallel groups every engine of the process runs on, and the next request here failed with "pipeline model
    parallel group is not initialized". Which test module ran such an engine before this one depends on how the
    modules are spread over processes (pytest-xdist), so the check is here rather than in the order of the tests.
    """
    from vllm.distributed.parallel_state import model_parallel_is_initialized

    setup = _built()
    if not model_parallel_is_initialized():
        setup.engine.close()  # its groups are gone already; closing it first keeps its teardown off the new engine's
        setup.engine = _engine(setup.model_dir, setup.plugins)
    return setup


@lru_cache(maxsize=1)
def _built() -> VllmSetup:
    """Build the tiny model, its adapter and the engine (once per process)."""
    from swiftcore_testing import make_tiny_qwen3, plugins_with_tiny_qwen3, train_tiny_lora

    work = Path(tempfile.mkdtemp(prefix="swiftcore-vllm-test-"))
    atexit.register(shutil.rmtree, work, True)
    plugins = plugins_with_tiny_qwen3()
    model_dir = make_tiny_qwen3(work / "tiny-qwen3")
    lora_dir = train_tiny_lora(model_dir, work / "lora", plugins)
    return VllmSetup(plugins, model_dir, lora_dir, work, _engine(model_dir, plugins))


def _engine(model_dir: Path, plugins: PluginSet) -> Any:
    """The shared engine's configuration: float32, LoRA up to rank 8, embeddings; closed at exit."""
    from swiftcore_backend_vllm.engine import VllmEngine

    engine = VllmEngine(model_dir, plugins, dtype="float32", max_model_len=1024, max_lora_rank=8, embeddings=True)
    atexit.register(engine.close)
    return engine
