"""Hook implementations of swiftcore-plugin-mimo-v2: the model spec, as plain data."""

from __future__ import annotations

from swiftcore.api import ModelParts, ModelSpec, hookimpl

SWIFTCORE_API = "1.0"

_TINY = "swiftcore_plugin_mimo_v2.tiny"


@hookimpl
def swiftcore_register_models() -> list[ModelSpec]:
    """MiMo-V2-Flash (``mimo_v2_flash``): hybrid sliding-window/full attention, mixture of experts, text only."""
    return [
        ModelSpec(
            name="mimo_v2_flash",
            model_types=("mimo_v2_flash",),
            architectures=("MiMoV2FlashForCausalLM",),
            model_class="transformers:MiMoV2FlashForCausalLM",
            default_template="mimo_v2",
            # Full-match regex. The router (``mlp.gate``, a sigmoid top-k with a score-correction bias)
            # decides expert placement: adapting it destabilises routing. The tuner's all-linear plan
            # leaves routers out anyway; saying it here also covers explicit --lora-target lists.
            # The experts (fused 3D weights) and the dense first layer's MLP stay adapted.
            lora_exclude_modules=(r".*\.mlp\.gate",),
            parts=ModelParts(language_model=("model",), lm_head=("lm_head",)),
            requires=("transformers>=5.19",),
            tiny_config=f"{_TINY}:tiny_mimo_v2_config",
            tiny_tokenizer=f"{_TINY}:tiny_mimo_v2_tokenizer",
            tasks=("causal_lm",),
            modalities=("text",),
            description="MiMo-V2-Flash: hybrid sliding-window attention with sinks, mixture of experts",
        ),
    ]
