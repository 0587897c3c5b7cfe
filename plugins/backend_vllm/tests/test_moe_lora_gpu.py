"""LoRA on a mixture-of-experts family through vLLM's CUDA build (run by ``scripts/gpu_check.sh vllm``).

The CPU build refuses adapters on MoE models (its MoE LoRA layer runs Triton kernels; see
``tests/test_vllm_families.py``), so this runs only where vLLM has a GPU: a tiny OLMoE and an ``all-linear``
adapter from ``swiftcore train``, which carries fused 3D expert weights (peft ``target_parameters``). The engine
starts vLLM in its mixed MoE-LoRA format and loads the adapter as ``is_3d_lora_weight``; greedy tokens must equal
the transformers engine's with the same adapter, and the base model's too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow


def _on_gpu_build() -> bool:
    from swiftcore_backend_vllm.probe import cuda_build_with_gpu

    return cuda_build_with_gpu()


@pytest.mark.skipif(not _on_gpu_build(), reason="needs vLLM's CUDA build and a GPU (scripts/gpu_check.sh vllm)")
def test_a_fused_expert_adapter_on_moe_equals_transformers(tmp_path: Path) -> None:
    from swiftcore_backend_vllm.engine import VllmEngine
    from swiftcore_infer import TransformersEngine
    from swiftcore_testing import train_tiny_lora
    from swiftcore_tiny import make_tiny

    from swiftcore.api.plugins import load_plugins

    plugins: Any = load_plugins(env={})
    base = make_tiny(plugins.registry.get("model", "olmoe"), tmp_path / "olmoe", seed=0)
    adapter = train_tiny_lora(base, tmp_path / "lora", plugins)
    assert json.loads((adapter / "adapter_config.json").read_text()).get("target_parameters")
    records = [{"messages": [{"role": "user", "content": f"Is {n} even or odd?"}]} for n in (3, 8, 13)]

    reference = TransformersEngine(base, plugins, adapter=adapter)
    engine = VllmEngine(base, plugins, adapter=adapter, dtype="float32", max_model_len=512, max_lora_rank=8)
    try:
        assert engine.lora_refusal is None
        tuned = [g.token_ids for g in engine.generate(records, max_new_tokens=12)]
        assert tuned == [g.token_ids for g in reference.generate(records, max_new_tokens=12)]
        bare = [g.token_ids for g in engine.generate(records, max_new_tokens=12, adapter="base")]
        assert bare == [g.token_ids for g in reference.generate(records, max_new_tokens=12, adapter="base")]
        assert tuned != bare
    finally:
        engine.close()
