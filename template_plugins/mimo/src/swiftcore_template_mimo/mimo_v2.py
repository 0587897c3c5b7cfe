"""MiMo-V2-Flash: reproduces ``official/mimo_v2.jinja`` (see the README for where it comes from).

The turns are Qwen3.5's (ChatML, reasoning kept after the last user query, XML tool calls,
``<tool_response>`` blocks in a user turn), so this subclasses
:class:`swiftcore_template_qwen.qwen3_5.Qwen35Template` and changes only what differs:

- a system turn is always rendered: the record's system text, else MiMo's default identity prompt;
  with tools, the tool list follows the system text inside that same turn (Qwen3.5 puts it first);
- thinking is *off* unless ``enable_thinking=True``: the generation prompt then ends
  ``<think>\\n``, otherwise with an empty thinking block;
- text only: media parts raise, as the official template's ``render_content`` does.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from swiftcore_template_qwen import Qwen35Template

from swiftcore.api.template import Conversation, Segment, TemplateError, prompt, strip_pieces, text_of

__all__ = ["DEFAULT_SYSTEM", "MimoV2Template"]

#: The system prompt the official template renders when a record has none.
DEFAULT_SYSTEM = "You are MiMo, an AI assistant developed by Xiaomi."


class MimoV2Template(Qwen35Template):
    """The MiMo-V2-Flash chat template (ChatML, thinking off by default, XML tool calls, text only)."""

    def generation_prompt(self, conv: Conversation) -> str:
        """``<|im_start|>assistant\\n`` and an empty thinking block; ``<think>\\n`` with ``enable_thinking=True``."""
        if conv.kwargs.get("enable_thinking", None) is True:
            return "<|im_start|>assistant\n<think>\n"
        return "<|im_start|>assistant\n<think>\n\n</think>\n\n"

    def _content(self, conv: Conversation, index: int, content: Any, counter: dict | None,
                 system: bool = False) -> list[Segment]:
        """The official ``render_content`` macro: strings and text parts; anything else raises."""
        if isinstance(content, list):
            for item in content:
                if not isinstance(item, dict) or "text" not in item:
                    kind = item.get("type", item) if isinstance(item, dict) else item
                    raise TemplateError(
                        f"{conv.where(index)}: Unexpected item type in content. (mimo_v2 is text only; got {kind!r})"
                    )
        return super()._content(conv, index, content, counter, system)

    def segments(self, conv: Conversation, add_generation_prompt: bool) -> list[Segment]:
        """Render as ``official/mimo_v2.jinja`` does: MiMo's system turn, then Qwen3.5's turns."""
        messages = conv.messages
        if not messages:
            raise TemplateError(f"{conv.where()}: No messages provided.")
        # Without tools, Qwen3.5 renders a first system message as one segment and nothing else before
        # the turns: swap that header for MiMo's.
        body = super().segments(replace(conv, tools=None), add_generation_prompt)
        first_system = messages[0].get("role") == "system"
        if first_system:
            body = body[1:]
            system = text_of(strip_pieces(self._content(conv, 0, messages[0].get("content"), None, system=True)))
        else:
            system = DEFAULT_SYSTEM
        head = "<|im_start|>system\n" + system
        if conv.tools:
            head += "\n\n" + self._tools_block(conv)
        return [prompt(head + "<|im_end|>\n", 0 if first_system else None), *body]

    def _tools_block(self, conv: Conversation) -> str:
        """The tool list and call instructions: Qwen3.5's (its first piece, on a one-message probe), without
        the ``<|im_start|>system\\n`` that opens it there; MiMo writes it after the system text."""
        probe = replace(conv, messages=[{"role": "user", "content": "?"}])
        return super().segments(probe, False)[0][0].removeprefix("<|im_start|>system\n")
