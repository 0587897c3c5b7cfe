"""Hook implementations of swiftcore-bridge-qwen3-asr (no torch or megatron import here)."""

from __future__ import annotations

from swiftcore.api import BridgeSpec, hookimpl

SWIFTCORE_API = "1.0"


@hookimpl
def swiftcore_register_bridges() -> list[BridgeSpec]:
    """The Qwen3-ASR bridge."""
    return [
        BridgeSpec(
            name="qwen3_asr",
            model_types=("qwen3_asr",),
            factory="swiftcore_bridge_qwen3_asr.bridge:Qwen3ASRBridge",
            parallelism=("tp",),
            requires=("megatron-core>=0.16.1,<0.17",),
            description="Qwen3-ASR language model <-> megatron-core GPTModel; audio tower carried through",
        ),
    ]
