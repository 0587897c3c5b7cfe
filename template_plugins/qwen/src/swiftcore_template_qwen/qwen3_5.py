"""Qwen3.5: reproduces ``official/qwen3_5.jinja`` (llama.cpp's copy of Qwen3.5-4B's template).

Thinking is on by default (the generation prompt ends ``<think>\\n``); only ``enable_thinking=False``
gives an empty thinking block. Tool calls are XML (``<function=NAME><parameter=K>``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from swiftcore.api.template import (
    Conversation,
    Segment,
    Template,
    TemplateError,
    json_or_text,
    media,
    media_type,
    prompt,
    split_reasoning,
    strip_pieces,
    text_of,
    tojson,
    tool_call,
)

__all__ = ["Qwen35Template"]

_TOOLS_HEAD = "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>"
_TOOLS_TAIL = (
    "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
    "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n"
    "</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the "
    "specified format: an inner <function=...></function> block must be nested within <tool_call></tool_call> "
    "XML tags\n- Required parameters MUST be specified\n- You may provide optional reasoning for your function "
    "call in natural language BEFORE the function call, but NOT after\n- If there is no function call available, "
    "answer the question like normal with your current knowledge and do not tell the user about function calls\n"
    "</IMPORTANT>"
)
_PLACEHOLDER = {"image": "<|vision_start|><|image_pad|><|vision_end|>",
                "video": "<|vision_start|><|video_pad|><|vision_end|>"}
_TOOL_CALL = re.compile(r"<tool_call>\s*<function=([^>\n]+)>(.*?)</function>\s*</tool_call>", re.S)
_PARAM = re.compile(r"<parameter=([^>\n]+)>\n?(.*?)\n?</parameter>", re.S)


class Qwen35Template(Template):
    """The Qwen3.5 chat template (ChatML, thinking on by default, XML tool calls)."""

    stop_words = ("<|im_end|>",)
    thinking_switch = True
    response_markers = ("<tool_call>", "</tool_call>")

    def generation_prompt(self, conv: Conversation) -> str:
        """``<|im_start|>assistant\\n<think>\\n`` (or an empty thinking block when thinking is off)."""
        if conv.kwargs.get("enable_thinking", None) is False:
            return "<|im_start|>assistant\n<think>\n\n</think>\n\n"
        return "<|im_start|>assistant\n<think>\n"

    # ------------------------------------------------------------------ content

    def _content(self, conv: Conversation, index: int, content: Any, counter: dict | None,
                 system: bool = False) -> list[Segment]:
        """The official ``render_content`` macro, as pieces; ``counter`` counts media (None: don't)."""
        if isinstance(content, str):
            return [prompt(content, index)]
        if content is None:
            return []
        if not isinstance(content, list):
            raise TemplateError(f"{conv.where(index)}: Unexpected content type. (give a string or a list of parts)")
        out: list[Segment] = []
        add_ids = conv.kwargs.get("add_vision_id")
        for item in content:
            kind = media_type(item)
            if kind in _PLACEHOLDER:
                if system:
                    raise TemplateError(f"{conv.where(index)}: System message cannot contain {kind}s.")
                if counter is not None:
                    counter[kind] += 1
                if add_ids:
                    label = "Picture" if kind == "image" else "Video"
                    out.append(prompt(f"{label} {counter[kind] if counter else 0}: ", index))
                out.append(media(_PLACEHOLDER[kind], kind, item, index))
            elif "text" in item:
                out.append(prompt(str(item["text"]), index))
            else:
                raise TemplateError(
                    f"{conv.where(index)}: Unexpected item type in content. (qwen3_5 renders text, image and "
                    f"video parts; got {item.get('type', item)!r})"
                )
        return out

    # ------------------------------------------------------------------ rendering

    def segments(self, conv: Conversation, add_generation_prompt: bool) -> list[Segment]:
        """Render as ``official/qwen3_5.jinja`` does."""
        messages = conv.messages
        if not messages:
            raise TemplateError(f"{conv.where()}: No messages provided.")
        out: list[Segment] = []
        first_system = messages[0].get("role") == "system"
        tools = conv.tools
        if tools:
            out.append(prompt(_TOOLS_HEAD + "".join("\n" + tojson(t) for t in tools) + _TOOLS_TAIL))
            if first_system:
                content = strip_pieces(self._content(conv, 0, messages[0].get("content"), None, system=True))
                if content:
                    out += [prompt("\n\n", 0), *content]
            out.append(prompt("<|im_end|>\n"))
        elif first_system:
            content = strip_pieces(self._content(conv, 0, messages[0].get("content"), None, system=True))
            if all(p.kind == "prompt" for p in content):  # no media: one piece
                out.append(prompt("<|im_start|>system\n" + text_of(content) + "<|im_end|>\n", 0))
            else:
                out += [prompt("<|im_start|>system\n", 0), *content, prompt("<|im_end|>\n", 0)]

        last_query = self._last_query(conv)
        counter = {"image": 0, "video": 0}
        for index, message in enumerate(messages):
            role = message.get("role")
            raw = message.get("content")
            if isinstance(raw, str):  # the common case: skip building and re-joining pieces
                text = raw.strip()
                content = [prompt(text, index)] if text else []
            else:
                content = strip_pieces(self._content(conv, index, raw, counter))
                text = None
            if role == "system":
                if index != 0:
                    raise TemplateError(f"{conv.where(index)}: System message must be at the beginning.")
            elif role == "user":
                if text is not None:  # one piece: the turn is all prompt
                    out.append(prompt("<|im_start|>user\n" + text + "<|im_end|>\n", index))
                else:
                    out += [prompt("<|im_start|>user\n", index), *content, prompt("<|im_end|>\n", index)]
            elif role == "assistant":
                out.append(Segment(self._assistant(message, text_of(content) if text is None else text,
                                                   index > last_query), "assistant", index))
                out.append(prompt("\n", index))
            elif role == "tool":
                head = ""
                if index > 0 and messages[index - 1].get("role") != "tool":
                    head = "<|im_start|>user"
                out += [prompt(head + "\n<tool_response>\n", index), *content, prompt("\n</tool_response>", index)]
                last = index == len(messages) - 1
                if last or messages[index + 1].get("role") != "tool":
                    out.append(prompt("<|im_end|>\n", index))
            else:
                raise TemplateError(
                    f"{conv.where(index)}: Unexpected message role. ({role!r}; qwen3_5 takes system, user, "
                    "assistant and tool)"
                )
        if add_generation_prompt:
            out.append(prompt(self.generation_prompt(conv)))
        return out

    def _last_query(self, conv: Conversation) -> int:
        for index in range(len(conv.messages) - 1, -1, -1):
            message = conv.messages[index]
            if message.get("role") != "user":
                continue
            content = message.get("content")
            if isinstance(content, str):  # the common case, without building pieces
                content = content.strip()
            else:
                content = text_of(self._content(conv, index, content, None)).strip()
            if not (content.startswith("<tool_response>") and content.endswith("</tool_response>")):
                return index
        raise TemplateError(f"{conv.where()}: No user query found in messages. (qwen3_5 needs a user message)")

    def _assistant(self, message: Mapping[str, Any], content: str, after_query: bool) -> str:
        reasoning = message.get("reasoning_content")
        if not isinstance(reasoning, str):
            reasoning = ""
            if "</think>" in content:
                reasoning = content.split("</think>")[0].rstrip("\n").split("<think>")[-1].lstrip("\n")
                content = content.split("</think>")[-1].lstrip("\n")
        reasoning = reasoning.strip()
        if after_query:
            text = "<|im_start|>assistant\n<think>\n" + reasoning + "\n</think>\n\n" + content
        else:
            text = "<|im_start|>assistant\n" + content
        calls = message.get("tool_calls")
        if calls and isinstance(calls, list):
            for k, call in enumerate(calls):
                if isinstance(call, Mapping) and "function" in call:
                    call = call["function"]
                name = str(call.get("name", ""))
                if k == 0:
                    text += ("\n\n" if content.strip() else "") + "<tool_call>\n<function=" + name + ">\n"
                else:
                    text += "\n<tool_call>\n<function=" + name + ">\n"
                if "arguments" in call:
                    arguments = call["arguments"]
                    if not isinstance(arguments, Mapping):
                        raise TemplateError("tool-call arguments must be a mapping or a JSON object string")
                    for key, value in arguments.items():
                        shown = tojson(value) if isinstance(value, (Mapping, list, tuple)) else str(value)
                        text += "<parameter=" + str(key) + ">\n" + shown + "\n</parameter>\n"
                text += "</function>\n</tool_call>"
        return text + "<|im_end|>"

    # ------------------------------------------------------------------ parsing

    def parse_response(self, text: str) -> dict[str, Any]:
        """Reasoning (before ``</think>``), content, and XML tool calls."""
        text = text.split("<|im_end|>", 1)[0]
        reasoning, content = split_reasoning(text)
        calls = []
        for name, body in _TOOL_CALL.findall(content):
            arguments = {key.strip(): json_or_text(value) for key, value in _PARAM.findall(body)}
            calls.append(tool_call(name.strip(), arguments))
        if calls:
            content = content[: content.find("<tool_call>")].strip()
        return {"content": content, "reasoning_content": reasoning, "tool_calls": calls}
