"""Qwen3 (0.6B ... 8B): reproduces ``official/qwen3.jinja``.

Content must be a string (the official template concatenates it); thinking blocks are rendered only
after the last user query; the generation prompt gets an empty thinking block when
``enable_thinking=False``. Tool calls are JSON inside ``<tool_call>`` tags (Hermes style).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from swiftcore.api.template import (
    Conversation,
    Segment,
    Template,
    TemplateError,
    prompt,
    split_reasoning,
    tojson,
    tool_call,
)

__all__ = ["Qwen3Template"]

_TOOLS_HEAD = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "
    "function signatures within <tools></tools> XML tags:\n<tools>"
)
_TOOLS_TAIL = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call><|im_end|>\n"
)
_TOOL_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.S)


class Qwen3Template(Template):
    """The Qwen3 chat template (ChatML, hybrid thinking, Hermes-style JSON tool calls)."""

    stop_words = ("<|im_end|>", "<|endoftext|>")
    thinking_switch = True
    response_markers = ("<tool_call>", "</tool_call>")

    def generation_prompt(self, conv: Conversation) -> str:
        """``<|im_start|>assistant\\n``, plus an empty thinking block when thinking is off."""
        if conv.kwargs.get("enable_thinking", None) is False:
            return "<|im_start|>assistant\n<think>\n\n</think>\n\n"
        return "<|im_start|>assistant\n"

    def _text(self, conv: Conversation, index: int, value: Any = None) -> str:
        content = conv.messages[index].get("content") if value is None else value
        if not isinstance(content, str):
            raise TemplateError(
                f"{conv.where(index)}: qwen3 renders string content only (the official template concatenates "
                f"it and fails on {type(content).__name__}); media parts need a multimodal template"
            )
        return content

    def segments(self, conv: Conversation, add_generation_prompt: bool) -> list[Segment]:
        """Render as ``official/qwen3.jinja`` does."""
        messages = conv.messages
        if not messages:
            raise TemplateError(f"{conv.where()}: no messages to render")
        out: list[Segment] = []
        first_system = messages[0].get("role") == "system"
        if conv.tools:
            head = "<|im_start|>system\n" + (self._text(conv, 0) + "\n\n" if first_system else "")
            out.append(prompt(head + _TOOLS_HEAD + "".join("\n" + tojson(t) for t in conv.tools) + _TOOLS_TAIL))
        elif first_system:
            out.append(prompt("<|im_start|>system\n" + self._text(conv, 0) + "<|im_end|>\n", 0))

        last_query = len(messages) - 1
        for index in range(len(messages) - 1, -1, -1):
            if messages[index].get("role") == "user":
                content = self._text(conv, index)
                if not (content.startswith("<tool_response>") and content.endswith("</tool_response>")):
                    last_query = index
                    break

        for index, message in enumerate(messages):
            role = message.get("role")
            last = index == len(messages) - 1
            if role == "user" or (role == "system" and index > 0):
                out.append(prompt(f"<|im_start|>{role}\n" + self._text(conv, index) + "<|im_end|>\n", index))
            elif role == "assistant":
                text = self._assistant(conv, index, index > last_query, last)
                out += [Segment(text, "assistant", index), prompt("\n", index)]
            elif role == "tool":
                text = "<|im_start|>user" if index == 0 or messages[index - 1].get("role") != "tool" else ""
                text += "\n<tool_response>\n" + self._text(conv, index) + "\n</tool_response>"
                if last or messages[index + 1].get("role") != "tool":
                    text += "<|im_end|>\n"
                out.append(prompt(text, index))
        if add_generation_prompt:
            out.append(prompt(self.generation_prompt(conv)))
        return out

    def _assistant(self, conv: Conversation, index: int, after_query: bool, last: bool) -> str:
        message = conv.messages[index]
        content = self._text(conv, index)
        reasoning = message.get("reasoning_content")
        if reasoning is None:
            reasoning = ""
            if "</think>" in content:
                reasoning = content.split("</think>")[0].rstrip("\n").split("<think>")[-1].lstrip("\n")
                content = content.split("</think>")[-1].lstrip("\n")
        if after_query and (last or reasoning):
            text = "<|im_start|>assistant\n<think>\n" + reasoning.strip("\n") + "\n</think>\n\n" + content.lstrip("\n")
        else:
            text = "<|im_start|>assistant\n" + content
        for k, call in enumerate(message.get("tool_calls") or ()):
            if (k == 0 and content) or k > 0:
                text += "\n"
            if isinstance(call, Mapping) and call.get("function"):
                call = call["function"]
            arguments = call.get("arguments")
            shown = arguments if isinstance(arguments, str) else tojson(arguments)
            text += '<tool_call>\n{"name": "' + str(call.get("name")) + '", "arguments": ' + shown + "}\n</tool_call>"
        return text + "<|im_end|>"

    def parse_response(self, text: str) -> dict[str, Any]:
        """Reasoning, content and Hermes-style JSON tool calls."""
        text = text.split("<|im_end|>", 1)[0]
        reasoning, content = split_reasoning(text)
        calls = []
        for body in _TOOL_CALL.findall(content):
            try:
                data = json.loads(body)
            except ValueError:
                continue
            calls.append(tool_call(str(data.get("name", "")), data.get("arguments") or {}))
        if calls:
            content = content[: content.find("<tool_call>")].strip()
        return {"content": content, "reasoning_content": reasoning, "tool_calls": calls}
