"""Qwen3-ASR: reproduces ``official/qwen3_asr.jinja`` (transformers' ``qwen3_asr`` chat template).

The official template is not turn-by-turn: it always writes one system turn (all system text, even
empty), then one user turn holding one audio placeholder per audio part of any message (user text is
ignored), then the assistant turns. Answers look like ``language English<asr_text>...``.
"""

from __future__ import annotations

from typing import Any

from swiftcore.api.template import Conversation, Segment, Template, TemplateError, media, prompt

__all__ = ["Qwen3AsrTemplate"]

AUDIO = "<|audio_start|><|audio_pad|><|audio_end|>"


def _is_audio(part: Any) -> bool:
    return isinstance(part, dict) and (part.get("type") == "audio" or "audio" in part or "audio_url" in part)


class Qwen3AsrTemplate(Template):
    """The Qwen3-ASR chat template."""

    stop_words = ("<|im_end|>",)
    response_markers = ("<asr_text>",)
    #: The answer follows this marker (what precedes it is the language); a streaming server holds that back.
    content_start = "<asr_text>"

    def generation_prompt(self, conv: Conversation) -> str:
        """``<|im_start|>assistant\\n``."""
        return "<|im_start|>assistant\n"

    def _parts(self, conv: Conversation, index: int) -> list:
        content = conv.messages[index].get("content")
        if isinstance(content, str):
            return []
        if not isinstance(content, list):
            raise TemplateError(
                f"{conv.where(index)}: qwen3_asr needs content as a string or a list of parts, got "
                f"{type(content).__name__} (the official template iterates over it)"
            )
        return content

    def _text(self, conv: Conversation, index: int) -> str:
        content = conv.messages[index].get("content")
        if isinstance(content, str):
            return content
        return "".join(str(p["text"]) for p in self._parts(conv, index) if p.get("type") == "text" and "text" in p)

    def segments(self, conv: Conversation, add_generation_prompt: bool) -> list[Segment]:
        """Render as ``official/qwen3_asr.jinja`` does."""
        messages = conv.messages
        system = "".join(self._text(conv, i) for i, m in enumerate(messages) if m.get("role") == "system")
        out = [prompt("<|im_start|>system\n" + system + "<|im_end|>\n<|im_start|>user\n")]
        for index in range(len(messages)):
            out += [media(AUDIO, "audio", part, index) for part in self._parts(conv, index) if _is_audio(part)]
        out.append(prompt("<|im_end|>\n"))
        for index, message in enumerate(messages):
            if message.get("role") == "assistant":
                text = "<|im_start|>assistant\n" + self._text(conv, index) + "<|im_end|>"
                out += [Segment(text, "assistant", index), prompt("\n", index)]
        if add_generation_prompt:
            out.append(prompt(self.generation_prompt(conv)))
        return out

    def parse_response(self, text: str) -> dict[str, Any]:
        """``language X<asr_text>TRANSCRIPT`` -> content TRANSCRIPT (the language goes to ``language``)."""
        text = text.split("<|im_end|>", 1)[0]
        language, sep, transcript = text.partition("<asr_text>")
        out: dict[str, Any] = {"content": transcript if sep else text, "reasoning_content": None, "tool_calls": []}
        if sep:
            out["language"] = language.removeprefix("language ").strip()
        return out
