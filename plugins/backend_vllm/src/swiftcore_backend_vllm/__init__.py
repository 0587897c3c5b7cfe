"""swiftcore-backend-vllm: the vLLM inference backend (see :mod:`swiftcore_backend_vllm.engine`).

The face other distributions (and their tests) use: the ``speculative_config`` a ``--draft`` becomes, and whether
this vLLM is a CUDA build with a GPU. Importing it imports neither vLLM nor torch.
"""

from __future__ import annotations

from swiftcore.api import lazy_exports

__all__ = ["cuda_build_with_gpu", "speculative_config"]

__getattr__ = lazy_exports(__name__, {"speculative_config": "engine", "cuda_build_with_gpu": "probe"})
