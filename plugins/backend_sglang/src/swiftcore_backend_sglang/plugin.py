"""Hook implementations of swiftcore-backend-sglang (plain data; SGLang is imported only when an engine starts)."""

from __future__ import annotations

from swiftcore.api import BackendSpec, hookimpl

SWIFTCORE_API = "1.0"


@hookimpl
def swiftcore_register_backends() -> list[BackendSpec]:
    """The ``sglang`` backend."""
    return [
        BackendSpec(
            name="sglang",
            factory="swiftcore_backend_sglang.engine:SglangEngine",
            probe="swiftcore_backend_sglang.probe:probe",
            capabilities=("generate", "stream", "embed", "lora", "update_weights"),
            description="SGLang's offline Engine (CUDA GPUs): RadixAttention, LoRA per request, weight updates",
        )
    ]
