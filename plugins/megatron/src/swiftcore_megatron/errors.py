"""Errors raised by the Megatron-core conversion driver and the bridges."""

from __future__ import annotations

from swiftcore.api import SwiftcoreError

__all__ = ["BridgeError", "BridgeNotFoundError", "CheckpointError", "MappingError", "ParallelismError"]


class BridgeError(SwiftcoreError):
    """A bridge cannot convert this checkpoint (unsupported config value, bad mapping)."""


class BridgeNotFoundError(BridgeError):
    """No installed bridge converts the checkpoint's ``model_type``."""


class CheckpointError(BridgeError):
    """A checkpoint directory is incomplete or inconsistent (missing shard, missing or extra tensors)."""


class MappingError(BridgeError):
    """A tensor does not have the shape a mapping rule expects."""


class ParallelismError(BridgeError):
    """The requested tensor/expert parallel sizes do not divide the model's dimensions."""
