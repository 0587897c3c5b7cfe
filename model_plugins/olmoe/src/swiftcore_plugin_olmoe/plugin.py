"""Hook implementations of swiftcore-plugin-olmoe: the model spec, as plain data."""

from __future__ import annotations

from swiftcore.api import ModelParts, ModelSpec, hookimpl

SWIFTCORE_API = "1.0"

_TINY = "swiftcore_plugin_olmoe.tiny"


@hookimpl
def swiftcore_register_models() -> list[ModelSpec]:
    """OLMoE (``olmoe``): every decoder layer a softmax top-k mixture of experts, text only."""
    return [
        ModelSpec(
            name="olmoe",
            model_types=("olmoe",),
            architectures=("OlmoeForCausalLM",),
            model_class="transformers:OlmoeForCausalLM",
            default_template="olmoe",
            # Full-match regex: the router (``mlp.gate``, an OlmoeTopKRouter holding one weight) decides
            # expert placement and is never adapted, also not through an explicit --target-modules list.
            # ``all-linear`` adapts attention and the experts' fused gate_up_proj / down_proj weights.
            lora_exclude_modules=(r".*\.mlp\.gate",),
            parts=ModelParts(language_model=("model",), lm_head=("lm_head",)),
            requires=("transformers>=5.19",),
            tiny_config=f"{_TINY}:tiny_olmoe_config",
            tiny_tokenizer=f"{_TINY}:tiny_olmoe_tokenizer",
            tasks=("causal_lm",),
            modalities=("text",),
            description="OLMoE: open mixture of experts (q/k norm over all heads, 64 experts top-8 at 1B-7B)",
        ),
    ]
