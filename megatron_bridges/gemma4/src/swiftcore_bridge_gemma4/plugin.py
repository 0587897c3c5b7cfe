"""Hook implementations of swiftcore-bridge-gemma4 (no torch or megatron import here)."""

from __future__ import annotations

from swiftcore.api import BridgeSpec, hookimpl

SWIFTCORE_API = "1.0"


@hookimpl
def swiftcore_register_bridges() -> list[BridgeSpec]:
    """The Gemma 4 text-decoder bridge."""
    return [
        BridgeSpec(
            name="gemma4",
            model_types=("gemma4", "gemma4_text"),
            factory="swiftcore_bridge_gemma4.bridge:Gemma4Bridge",
            parallelism=("tp",),
            requires=("megatron-core>=0.16.1,<0.17",),
            description=(
                "Gemma 4 text decoder (per-layer inputs, sliding/full attention, KV sharing, k=v, MoE block) "
                "<-> megatron-core GPTModel with its own layer spec; vision and audio towers carried through"
            ),
        ),
    ]
