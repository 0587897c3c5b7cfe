"""Hook implementations of swiftcore-bridge-gpt (no torch or megatron import here)."""

from __future__ import annotations

from swiftcore.api import BridgeSpec, hookimpl

SWIFTCORE_API = "1.5"  # written against plugin API 1.5: the package face uses swiftcore.api.lazy_exports

_REQUIRES = ("megatron-core>=0.16.1,<0.17",)


@hookimpl
def swiftcore_register_bridges() -> list[BridgeSpec]:
    """The dense GPT, Qwen3-MoE-style MoE and DeepSeek-V3-style MLA + MoE bridges."""
    return [
        BridgeSpec(
            name="gpt",
            model_types=("qwen3", "llama"),
            factory="swiftcore_bridge_gpt.gpt:GPTBridge",
            parallelism=("tp",),
            requires=_REQUIRES,
            description="dense GPT decoders (Qwen3, Llama) <-> megatron-core GPTModel (local spec)",
        ),
        BridgeSpec(
            name="gpt_moe",
            model_types=("qwen3_moe",),
            factory="swiftcore_bridge_gpt.gpt:GPTMoEBridge",
            parallelism=("tp", "ep"),
            requires=_REQUIRES,
            description="Qwen3-MoE-style decoders <-> megatron-core GPTModel with routed experts",
        ),
        BridgeSpec(
            name="deepseek_v3",
            model_types=("deepseek_v3",),
            factory="swiftcore_bridge_gpt.deepseek:DeepSeekV3Bridge",
            parallelism=("tp", "ep"),
            requires=_REQUIRES,
            description="DeepSeek-V3-style MLA + sigmoid-routed MoE <-> megatron-core GPTModel (MLA spec)",
        ),
    ]
