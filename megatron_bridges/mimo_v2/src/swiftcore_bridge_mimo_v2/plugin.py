"""Hook implementations of swiftcore-bridge-mimo-v2 (no torch or megatron import here)."""

from __future__ import annotations

from swiftcore.api import BridgeSpec, hookimpl

SWIFTCORE_API = "1.0"


@hookimpl
def swiftcore_register_bridges() -> list[BridgeSpec]:
    """The MiMo-V2-Flash bridge."""
    return [
        BridgeSpec(
            name="mimo_v2_flash",
            model_types=("mimo_v2_flash",),
            factory="swiftcore_bridge_mimo_v2.bridge:MimoV2Bridge",
            parallelism=("tp", "ep"),
            requires=("megatron-core>=0.16.1,<0.17",),
            description=(
                "MiMo-V2-Flash (sliding/full attention with sinks, q/k head size != v head size, sigmoid-routed "
                "MoE) <-> megatron-core GPTModel with its own attention module"
            ),
        ),
    ]
