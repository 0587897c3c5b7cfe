"""Hook implementations of swiftcore-bridge-olmoe (no torch or megatron import here)."""

from __future__ import annotations

from swiftcore.api import BridgeSpec, hookimpl

SWIFTCORE_API = "1.0"


@hookimpl
def swiftcore_register_bridges() -> list[BridgeSpec]:
    """The OLMoE bridge."""
    return [
        BridgeSpec(
            name="olmoe",
            model_types=("olmoe",),
            factory="swiftcore_bridge_olmoe.bridge:OlmoeBridge",
            parallelism=("tp", "pp", "ep"),
            requires=("megatron-core>=0.16.1,<0.17",),
            description="OLMoE <-> megatron-core GPTModel (routed experts, whole-width q/k RMSNorm)",
        ),
    ]
