"""Hook implementations of swiftcore-bridge-glm5 (no torch or megatron import here)."""

from __future__ import annotations

from swiftcore.api import BridgeSpec, hookimpl

SWIFTCORE_API = "1.0"


@hookimpl
def swiftcore_register_bridges() -> list[BridgeSpec]:
    """The GLM-5 bridge."""
    return [
        BridgeSpec(
            name="glm5",
            model_types=("glm_moe_dsa",),
            factory="swiftcore_bridge_glm5.bridge:Glm5Bridge",
            parallelism=("tp", "ep"),
            requires=("megatron-core>=0.16.1,<0.17",),
            description="GLM-5 <-> megatron-core GPTModel (MLA + DSA sparse attention, shared + routed experts)",
        ),
    ]
