"""Hugging Face <-> Megatron-core conversion: the bridge contract and the conversion driver.

Modules (import the one you need; this package imports neither torch nor megatron):

- :mod:`~swiftcore.megatron.bridge`: :class:`MegatronBridge`, the base class bridges subclass.
- :mod:`~swiftcore.megatron.mapping`: rules tying mcore tensors to HF tensors, used in both directions.
- :mod:`~swiftcore.megatron.convert`: :func:`hf_to_mcore`, :func:`mcore_to_hf`, :func:`load_mcore_state`.
- :mod:`~swiftcore.megatron.checkpoint`: the checkpoint layout written, and streamed readers/writers.
- :mod:`~swiftcore.megatron.resolve`: which installed bridge converts a checkpoint.
- :mod:`~swiftcore.megatron.runtime`, :mod:`~swiftcore.megatron.parity`: run mcore models, check logits.
- :mod:`~swiftcore.megatron.cpu_patches`: what megatron-core needs to run on a CPU.
"""

from __future__ import annotations

from swiftcore.megatron.bridge import MegatronBridge
from swiftcore.megatron.errors import (
    BridgeError,
    BridgeNotFoundError,
    CheckpointError,
    MappingError,
    ParallelismError,
)

__all__ = [
    "BridgeError",
    "BridgeNotFoundError",
    "CheckpointError",
    "MappingError",
    "MegatronBridge",
    "ParallelismError",
]
