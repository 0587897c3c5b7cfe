"""Hook implementations of swiftcore-plugin-glm5: the model spec, as plain data."""

from __future__ import annotations

from typing import Any

from swiftcore.api import ModelParts, ModelSpec, hookimpl

SWIFTCORE_API = "1.0"

_TINY = "swiftcore_plugin_glm5.tiny"


@hookimpl
def swiftcore_register_models() -> list[ModelSpec]:
    """GLM-5 (``glm_moe_dsa``): MLA attention with the DSA top-k indexer, dense first layers, then MoE."""
    return [
        ModelSpec(
            name="glm5",
            model_types=("glm_moe_dsa",),
            architectures=("GlmMoeDsaForCausalLM",),
            model_class="transformers:GlmMoeDsaForCausalLM",
            default_template="glm5",
            # Full-match regexes. The router (``mlp.gate``, a GlmMoeDsaTopkRouter holding one weight and the
            # expert-score bias) decides expert placement and is never adapted. The DSA indexer runs under
            # torch.no_grad() in transformers (it is trained apart, by a distillation loss, not by the LM loss):
            # LoRA on its wq_b / wk / weights_proj would get no gradient, so it is left out too.
            lora_exclude_modules=(r".*\.mlp\.gate", r".*\.self_attn\.indexer(\..*)?"),
            parts=ModelParts(language_model=("model",), lm_head=("lm_head",)),
            requires=("transformers>=5.19",),
            tiny_config=f"{_TINY}:tiny_glm5_config",
            tiny_tokenizer=f"{_TINY}:tiny_glm5_tokenizer",
            tasks=("causal_lm",),
            modalities=("text",),
            description="GLM-5: MLA + DSA sparse attention (lightning indexer), 1 shared + 256 routed experts top-8",
        ),
    ]


@hookimpl
def swiftcore_post_model_load(model: Any, spec: ModelSpec, model_dir: str) -> None:
    """Make the DSA attention layers exact on packed (padding-free) batches; see ``packing``."""
    if spec.name != "glm5":
        return
    # Imported here: the patch needs transformers, which importing this plugin must not load.
    from swiftcore_plugin_glm5.packing import patch_packed_dsa_attention

    patch_packed_dsa_attention(model)
