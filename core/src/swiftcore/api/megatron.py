"""What a Megatron-core bridge is written with: the bridge base class, weight-mapping rules and errors."""

from __future__ import annotations

from swiftcore.megatron.bridge import MegatronBridge
from swiftcore.megatron.errors import BridgeError, MappingError, ParallelismError
from swiftcore.megatron.mapping import COLUMN, QKV, ROW, Concat, Fuse, Rule, Shard

__all__ = [
    "COLUMN",
    "QKV",
    "ROW",
    "BridgeError",
    "Concat",
    "Fuse",
    "MappingError",
    "MegatronBridge",
    "ParallelismError",
    "Rule",
    "Shard",
]
