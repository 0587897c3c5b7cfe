"""Hook implementations of swiftcore-plugin-gemma4: the model spec, as plain data."""

from __future__ import annotations

from swiftcore.api import ModelParts, ModelSpec, hookimpl

SWIFTCORE_API = "1.3"  # ModelSpec.processor came in plugin API 1.3

_TINY = "swiftcore_plugin_gemma4.tiny"


@hookimpl
def swiftcore_register_models() -> list[ModelSpec]:
    """Gemma 4 (``gemma4``): text, image and audio."""
    return [
        ModelSpec(
            name="gemma4",
            model_types=("gemma4", "gemma4_text"),
            architectures=("Gemma4ForConditionalGeneration", "Gemma4ForCausalLM"),
            model_class="transformers:Gemma4ForConditionalGeneration",
            default_template="gemma4",
            # Full-match regexes: the towers and their embedders (projectors) stay out of LoRA; the
            # audio tower's clipped linears would not survive merging anyway.
            lora_exclude_modules=(
                r"model\.vision_tower(\..*)?",
                r"model\.audio_tower(\..*)?",
                r"model\.embed_vision(\..*)?",
                r"model\.embed_audio(\..*)?",
            ),
            # Module names on Gemma4ForConditionalGeneration (checked on a tiny instance).
            parts=ModelParts(
                language_model=("model.language_model",),
                vision_tower=("model.vision_tower",),
                audio_tower=("model.audio_tower",),
                projector=("model.embed_vision", "model.embed_audio"),
                lm_head=("lm_head",),
            ),
            requires=("transformers>=5.19",),
            tiny_config=f"{_TINY}:tiny_gemma4_config",
            tiny_tokenizer=f"{_TINY}:tiny_gemma4_tokenizer",
            tasks=("causal_lm",),
            modalities=("text", "image", "audio"),
            processor="swiftcore_plugin_gemma4.media:load_processor",
            description="Gemma 4: text, image and audio",
        ),
    ]
