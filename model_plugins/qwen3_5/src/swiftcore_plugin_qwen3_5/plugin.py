"""Hook implementations of swiftcore-plugin-qwen3_5: the model specs, as plain data."""

from __future__ import annotations

from typing import Any

from swiftcore.api import ModelParts, ModelSpec, hookimpl
from swiftcore_plugin_qwen3_5.kernels import quiet_kernel_advice

SWIFTCORE_API = "1.0"

# Without CUDA, transformers' advice to install Qwen3.5's CUDA kernels becomes one line saying none is needed (see
# ``kernels``); a logging filter, put on when the plugin loads so every command's first forward has it.
quiet_kernel_advice()

_TINY = "swiftcore_plugin_qwen3_5.tiny"

# Module names on transformers' *ForConditionalGeneration classes (checked on tiny instances).
_PARTS = ModelParts(
    language_model=("model.language_model",),
    vision_tower=("model.visual",),
    projector=("model.visual.merger",),
    lm_head=("lm_head",),
)
# Full-match regexes over module names: keep LoRA off the vision tower (its merger included).
_EXCLUDE_VISION = (r"model\.visual(\..*)?",)
# MoE routers and the shared-expert gate are tiny and routing-sensitive: never adapt them.
_EXCLUDE_ROUTERS = (r".*\.mlp\.gate", r".*\.shared_expert_gate")


@hookimpl
def swiftcore_register_models() -> list[ModelSpec]:
    """Qwen3.5 dense (``qwen3_5``) and MoE (``qwen3_5_moe``)."""
    return [
        ModelSpec(
            name="qwen3_5",
            model_types=("qwen3_5", "qwen3_5_text"),
            architectures=("Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLM"),
            model_class="transformers:Qwen3_5ForConditionalGeneration",
            default_template="qwen3_5",
            lora_exclude_modules=_EXCLUDE_VISION,
            parts=_PARTS,
            requires=("transformers>=5.19",),
            tiny_config=f"{_TINY}:tiny_qwen3_5_config",
            tiny_tokenizer=f"{_TINY}:tiny_qwen3_5_tokenizer",
            tasks=("causal_lm",),
            # Video: swiftcore-media decodes it with PyAV and runs transformers' Qwen3-VL video processor without
            # torchvision (swiftcore_media.video); training and `swiftcore infer --backend transformers` take it.
            modalities=("text", "image", "video"),
            description="Qwen3.5 dense (hybrid linear/full attention), text, images and video",
            # make demo's default model: the core names no family, it runs the one a plugin offers.
            demo=True,
        ),
        ModelSpec(
            name="qwen3_5_moe",
            model_types=("qwen3_5_moe", "qwen3_5_moe_text"),
            architectures=("Qwen3_5MoeForConditionalGeneration", "Qwen3_5MoeForCausalLM"),
            model_class="transformers:Qwen3_5MoeForConditionalGeneration",
            default_template="qwen3_5",
            lora_exclude_modules=_EXCLUDE_VISION + _EXCLUDE_ROUTERS,
            parts=_PARTS,
            requires=("transformers>=5.19",),
            tiny_config=f"{_TINY}:tiny_qwen3_5_moe_config",
            tiny_tokenizer=f"{_TINY}:tiny_qwen3_5_tokenizer",
            tasks=("causal_lm",),
            modalities=("text", "image", "video"),
            description="Qwen3.5 mixture of experts (hybrid linear/full attention), text, images and video",
        ),
    ]


@hookimpl
def swiftcore_post_model_load(model: Any, spec: ModelSpec, model_dir: str) -> None:
    """Make the linear-attention layers exact on packed (padding-free) batches; see ``packing``."""
    if spec.name not in ("qwen3_5", "qwen3_5_moe"):
        return
    # Imported here: the patch needs transformers, which importing this plugin must not load.
    from swiftcore_plugin_qwen3_5.packing import patch_packed_linear_attention

    patch_packed_linear_attention(model)
