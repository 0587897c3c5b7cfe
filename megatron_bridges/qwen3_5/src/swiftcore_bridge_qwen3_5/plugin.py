"""Hook implementations of swiftcore-bridge-qwen3_5 (no torch or megatron import here)."""

from __future__ import annotations

from swiftcore.api import BridgeSpec, hookimpl

SWIFTCORE_API = "1.0"


@hookimpl
def swiftcore_register_bridges() -> list[BridgeSpec]:
    """The Qwen3.5 dense and MoE bridges."""
    return [
        BridgeSpec(
            name="qwen3_5",
            model_types=("qwen3_5", "qwen3_5_text"),
            factory="swiftcore_bridge_qwen3_5.bridge:Qwen3_5Bridge",
            parallelism=("tp", "pp"),
            requires=("megatron-core>=0.16.1,<0.17",),
            description=(
                "Qwen3.5 language model (gated DeltaNet + gated attention) <-> megatron-core GPTModel; "
                "vision tower and MTP weights carried through"
            ),
        ),
        BridgeSpec(
            name="qwen3_5_moe",
            model_types=("qwen3_5_moe", "qwen3_5_moe_text"),
            factory="swiftcore_bridge_qwen3_5.bridge:Qwen3_5MoeBridge",
            parallelism=("tp", "pp", "ep"),
            requires=("megatron-core>=0.16.1,<0.17",),
            description=(
                "Qwen3.5-MoE language model (gated DeltaNet + gated attention, routed and gated shared "
                "experts) <-> megatron-core GPTModel; vision tower and MTP weights carried through"
            ),
        ),
    ]
