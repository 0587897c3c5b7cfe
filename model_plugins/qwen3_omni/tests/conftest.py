"""Tests here never touch the Hugging Face Hub: every checkpoint is built locally."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session", autouse=True)
def _hub_offline() -> Iterator[None]:
    """Set ``HF_HUB_OFFLINE=1`` for the session, so a stray Hub lookup fails instead of waiting on the network."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        yield


@pytest.fixture(scope="session")
def plugins():
    """This plugin and its dependencies, nothing else."""
    import swiftcore

    return swiftcore.load_plugins(["qwen3_omni"], env={})


@pytest.fixture(scope="session")
def tiny_dir(plugins, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random tiny Qwen3-Omni checkpoint (seed 0), made once per session."""
    from swiftcore_tiny import make_tiny

    return make_tiny(plugins.registry.get("model", "qwen3_omni_moe"), tmp_path_factory.mktemp("qwen3_omni") / "tiny")


@pytest.fixture(scope="session")
def omni(tiny_dir: Path):
    """The whole tiny model (thinker, talker, Code2Wav) and its tokenizer, loaded with plain transformers."""
    import transformers

    model = transformers.Qwen3OmniMoeForConditionalGeneration.from_pretrained(str(tiny_dir)).eval()
    return model, transformers.AutoTokenizer.from_pretrained(str(tiny_dir))
