"""Hook implementations of swiftcore-plugin-deepseek-v4: the model spec, as plain data."""

from __future__ import annotations

from typing import Any

from swiftcore.api import ModelParts, ModelSpec, hookimpl

SWIFTCORE_API = "1.0"

_TINY = "swiftcore_plugin_deepseek_v4.tiny"


@hookimpl
def swiftcore_register_models() -> list[ModelSpec]:
    """DeepSeek-V4 (``deepseek_v4``): mixture of experts, text only."""
    return [
        ModelSpec(
            name="deepseek_v4",
            model_types=("deepseek_v4",),
            architectures=("DeepseekV4ForCausalLM",),
            model_class="transformers:DeepseekV4ForCausalLM",
            default_template="deepseek_v4",
            # Full-match regexes. The routers decide expert placement; the compressor and the
            # sparse-attention indexer score which tokens attend: adapting them destabilises routing.
            # o_a_proj is a grouped linear (one block per output group, applied to a 4-D tensor): a plain
            # LoRA Linear on it would mix the groups and fails on shape.
            lora_exclude_modules=(
                r".*\.mlp\.gate",
                r".*\.self_attn\.compressor\..*",
                r".*\.indexer\..*",
                r".*\.self_attn\.o_a_proj",
            ),
            parts=ModelParts(language_model=("model",), lm_head=("lm_head",)),
            requires=("transformers>=5.19",),
            tiny_config=f"{_TINY}:tiny_deepseek_v4_config",
            tiny_tokenizer=f"{_TINY}:tiny_deepseek_v4_tokenizer",
            tasks=("causal_lm",),
            modalities=("text",),
            description="DeepSeek-V4: mixture of experts with compressed sparse attention",
        ),
    ]


@hookimpl
def swiftcore_post_model_load(model: Any, spec: ModelSpec, model_dir: str) -> None:
    """Make the compressed attention layers exact on packed (padding-free) batches; see ``packing``."""
    if spec.name != "deepseek_v4":
        return
    # Imported here: the patch needs transformers, which importing this plugin must not load.
    from swiftcore_plugin_deepseek_v4.packing import patch_packed_compressed_attention

    patch_packed_compressed_attention(model)
