"""LoRA on a MoE decoder under a head resolves ``all-linear`` as SFT does (issue 16).

peft's own ``all-linear`` never adapts Qwen3.5-MoE's fused expert weights; the head recipes passed it to peft
unresolved, so a classifier or embedding model trained on a MoE family left every expert frozen.
"""

from __future__ import annotations

import re
from typing import Any

import pytest


@pytest.fixture(scope="module")
def moe_decoder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Any]:
    from swiftcore_heads.model import extract_decoder
    from swiftcore_tiny import make_tiny

    from swiftcore.api import load_plugins
    from swiftcore.api.models import load_model

    plugins = load_plugins()
    spec = plugins.registry.get("model", "qwen3_5_moe")
    model_dir = make_tiny(spec, tmp_path_factory.mktemp("moe") / "tiny", seed=0)
    return spec, model_dir, extract_decoder(load_model(spec, str(model_dir), plugins, torch_dtype="float32"), spec)


def test_a_head_on_a_moe_decoder_adapts_the_experts_and_never_the_router(moe_decoder: tuple[Any, Any, Any]) -> None:
    import torch
    from swiftcore_heads.tuning import apply_head_tuner
    from swiftcore_train import TrainConfig

    spec, model_dir, decoder = moe_decoder
    cfg = TrainConfig(model=str(model_dir), dataset=("x",), tuner="lora", lora_rank=4, lora_alpha=8)
    decoder, peft_model = apply_head_tuner(decoder, spec, cfg)
    kinds = set()
    for name, module in peft_model.named_modules():
        if hasattr(module, "lora_A"):
            name = name.replace(".base_layer", "")
            if getattr(module, "parameter_name", None):
                name = f"{name}.{module.parameter_name}"
            kinds.add(re.sub(r"^.*layers\.\d+\.", "", name))
    assert {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"} <= kinds
    assert {"self_attn.q_proj", "mlp.shared_expert.up_proj"} <= kinds
    assert not {"mlp.gate", "mlp.shared_expert_gate"} & kinds
    hidden = decoder(input_ids=torch.randint(0, 100, (1, 8))).last_hidden_state
    hidden.sum().backward()
    grads = [p.grad for n, p in peft_model.named_parameters() if "lora_B" in n and "experts" in n]
    assert grads and all(g is not None and g.abs().sum() > 0 for g in grads)
