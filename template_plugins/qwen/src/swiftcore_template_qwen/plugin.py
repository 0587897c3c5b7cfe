"""Hook implementations of swiftcore-template-qwen: the qwen3, qwen3_5 and qwen3_asr templates."""

from __future__ import annotations

from swiftcore.api import TemplateSpec, hookimpl

SWIFTCORE_API = "1.5"  # written against plugin API 1.5: the package face uses swiftcore.api.lazy_exports

_PKG = "swiftcore_template_qwen"


@hookimpl
def swiftcore_register_templates() -> list[TemplateSpec]:
    """The qwen family's templates (each reproduces the official Jinja packaged in ``official/``)."""
    return [
        TemplateSpec(
            name="qwen3",
            factory=f"{_PKG}.qwen3:Qwen3Template",
            official=f"{_PKG}:official/qwen3.jinja",
            special_tokens=("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
                            "</tool_call>", "<tool_response>", "</tool_response>"),
            supports=("system", "thinking", "tools"),
            description="Qwen3 text models (ChatML, hybrid thinking, JSON tool calls)",
        ),
        TemplateSpec(
            name="qwen3_5",
            factory=f"{_PKG}.qwen3_5:Qwen35Template",
            official=f"{_PKG}:official/qwen3_5.jinja",
            special_tokens=("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
                            "</tool_call>", "<tool_response>", "</tool_response>", "<|vision_start|>",
                            "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"),
            supports=("system", "thinking", "tools", "image", "video"),
            description="Qwen3.5 (thinking on by default, XML tool calls, image and video)",
        ),
        TemplateSpec(
            name="qwen3_asr",
            factory=f"{_PKG}.qwen3_asr:Qwen3AsrTemplate",
            official=f"{_PKG}:official/qwen3_asr.jinja",
            special_tokens=("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|audio_start|>", "<|audio_pad|>",
                            "<|audio_end|>", "<asr_text>"),
            supports=("system", "audio"),
            description="Qwen3-ASR speech recognition (audio in, 'language X<asr_text>...' out)",
        ),
    ]
