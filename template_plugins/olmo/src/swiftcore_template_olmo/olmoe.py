"""OLMoE-1B-7B-0924-Instruct: reproduces ``official/olmoe.jinja`` (the Tulu chat format with a BOS).

The rendering opens with the BOS (``<|endoftext|>``, which is also the EOS); system and user turns are
``<|role|>\\n`` + content + ``\\n``; an assistant turn is ``<|assistant|>\\n`` + content + EOS, plus ``\\n``
unless it is the last message. The official template has no tool or reasoning support: messages of any
other role (``tool``) render as nothing, ``tool_calls`` and ``reasoning_content`` are ignored, and content
must be a string (the template concatenates it; a list of parts or None fails there, and here).
"""

from __future__ import annotations

from swiftcore.api.template import Conversation, Segment, Template, TemplateError, prompt

__all__ = ["OlmoeTemplate"]

EOS = "<|endoftext|>"


class OlmoeTemplate(Template):
    """The OLMoE-Instruct chat template (Tulu style, no tools, no thinking)."""

    #: The BOS the official template renders first (the contract kit passes it to the Jinja as ``bos_token``).
    bos = EOS
    eos = EOS
    stop_words = (EOS,)

    def generation_prompt(self, conv: Conversation) -> str:
        """``<|assistant|>\\n``."""
        return "<|assistant|>\n"

    def _text(self, conv: Conversation, index: int) -> str:
        content = conv.messages[index].get("content")
        if not isinstance(content, str):
            raise TemplateError(
                f"{conv.where(index)}: olmoe renders string content only (the official template concatenates "
                f"it and fails on {type(content).__name__})"
            )
        return content

    def segments(self, conv: Conversation, add_generation_prompt: bool) -> list[Segment]:
        """Render as ``official/olmoe.jinja`` does."""
        messages = conv.messages
        out: list[Segment] = [prompt(self.bos)]
        for index, message in enumerate(messages):
            role = message.get("role")
            last = index == len(messages) - 1
            if role in ("system", "user"):
                out.append(prompt(f"<|{role}|>\n" + self._text(conv, index) + "\n", index))
            elif role == "assistant":
                out.append(Segment("<|assistant|>\n" + self._text(conv, index) + self.eos, "assistant", index))
                if not last:
                    out.append(prompt("\n", index))
            # Any other role renders as nothing, as in the official template.
            if last and add_generation_prompt:
                out.append(prompt(self.generation_prompt(conv)))
        return out
