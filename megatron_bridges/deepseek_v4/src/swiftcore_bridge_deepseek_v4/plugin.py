"""Hook implementations of swiftcore-bridge-deepseek-v4 (no torch or megatron import here)."""

from __future__ import annotations

from swiftcore.api import BridgeSpec, hookimpl

SWIFTCORE_API = "1.0"


@hookimpl
def swiftcore_register_bridges() -> list[BridgeSpec]:
    """The DeepSeek-V4 bridge."""
    return [
        BridgeSpec(
            name="deepseek_v4",
            model_types=("deepseek_v4",),
            factory="swiftcore_bridge_deepseek_v4.bridge:DeepseekV4Bridge",
            parallelism=("ep",),
            requires=("megatron-core>=0.16.1,<0.17",),
            description=(
                "DeepSeek-V4 (hyper-connections, sliding / compressed sparse / heavily compressed attention, "
                "hash-routed and top-k MoE) <-> megatron-core GPTModel; MTP weights carried through"
            ),
        ),
    ]
