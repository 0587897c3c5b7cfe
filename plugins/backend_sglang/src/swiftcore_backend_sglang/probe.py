"""Can SGLang run here? It needs the ``sglang`` package and a CUDA GPU (its PyPI wheel has no CPU path)."""

from __future__ import annotations

import os
from importlib.util import find_spec

__all__ = ["probe"]


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def probe() -> str | None:
    """None when SGLang can start here, else why not and what to do."""
    if find_spec("sglang") is None:
        return (
            "SGLang is not installed: pip install 'swiftcore-backend-sglang[gpu]' on a CUDA machine "
            "(its wheel requires a CUDA torch build; there is no CPU build on PyPI)"
        )
    if os.environ.get("SGLANG_USE_CPU_ENGINE") == "1":
        return None  # a source build of sgl-kernel for CPUs (AMX Xeons) was set up on purpose
    if not _cuda_available():
        return (
            "SGLang needs a CUDA GPU and none is visible (torch.cuda.is_available() is False); use "
            "--backend vllm or transformers on this machine"
        )
    return None
