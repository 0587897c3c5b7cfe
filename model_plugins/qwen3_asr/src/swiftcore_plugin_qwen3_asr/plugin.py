"""Hook implementations of swiftcore-plugin-qwen3-asr: the model spec, as plain data."""

from __future__ import annotations

from swiftcore.api import ModelParts, ModelSpec, hookimpl

SWIFTCORE_API = "1.0"

_TINY = "swiftcore_plugin_qwen3_asr.tiny"


@hookimpl
def swiftcore_register_models() -> list[ModelSpec]:
    """Qwen3-ASR (``qwen3_asr``): audio in, text out."""
    return [
        ModelSpec(
            name="qwen3_asr",
            model_types=("qwen3_asr",),
            architectures=("Qwen3ASRForConditionalGeneration",),
            model_class="transformers:Qwen3ASRForConditionalGeneration",
            default_template="qwen3_asr",
            # Full-match regexes: the audio encoder and the projector stay out of LoRA.
            lora_exclude_modules=(r"model\.audio_tower(\..*)?", r"model\.multi_modal_projector(\..*)?"),
            # Module names on Qwen3ASRForConditionalGeneration (checked on a tiny instance).
            parts=ModelParts(
                language_model=("model.language_model",),
                audio_tower=("model.audio_tower",),
                projector=("model.multi_modal_projector",),
                lm_head=("lm_head",),
            ),
            requires=("transformers>=5.19",),
            tiny_config=f"{_TINY}:tiny_qwen3_asr_config",
            tiny_tokenizer=f"{_TINY}:tiny_qwen3_asr_tokenizer",
            tasks=("asr", "causal_lm"),
            modalities=("text", "audio"),
            description="Qwen3-ASR: speech recognition (audio encoder + Qwen3 decoder)",
        ),
    ]
