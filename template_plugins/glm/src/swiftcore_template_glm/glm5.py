"""GLM-5 (and GLM-4.7): reproduces ``official/glm5.jinja``.

The rendering opens with ``[gMASK]<sop>``; a turn is ``<|role|>`` + text with no separator and no
end-of-turn token (a turn ends where the next one starts); tool schemas form a ``<|system|>`` turn first.
An assistant turn is ``<|assistant|>`` + ``<think>R</think>`` (reasoning kept only after the last user
message, or everywhere with ``clear_thinking=False``) or a bare ``</think>``, then the stripped content,
then ``<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>`` per call. Tool results
are ``<|observation|>`` (once per run of tool messages) + ``<tool_response>...</tool_response>`` each.
Thinking is on by default: the generation prompt is ``<|assistant|><think>``, with
``enable_thinking=False`` it is ``<|assistant|></think>``.

Training: generation stops at ``<|user|>``, ``<|observation|>`` or ``<|endoftext|>`` (GLM's generation
config), so a past reply is trained with the ``<|user|>`` / ``<|observation|>`` that starts the next turn, and
the last reply with ``<|endoftext|>`` (appended by the encoder); the rendering itself is the official one.
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
    prompt,
    split_reasoning,
    tojson,
    tool_call,
)

__all__ = ["Glm5Template"]

_TOOLS_HEAD = (
    "<|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
)
_TOOLS_TAIL = (
    "</tools>\n\nFor each function call, output the function name and arguments within the following XML "
    "format:\n<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}</arg_value>"
    "<arg_key>{arg-key-2}</arg_key><arg_value>{arg-value-2}</arg_value>...</tool_call>"
)
_STOPS = ("<|user|>", "<|observation|>", "<|endoftext|>")
_TOOL_CALL = re.compile(r"<tool_call>\s*([^<\n]+?)\s*((?:<arg_key>.*?</arg_value>\s*)*)</tool_call>", re.S)
_ARG = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.S)


def _jinja_str(value: Any) -> str:
    """How Jinja prints a value (``None`` -> ``None``, booleans as Python writes them)."""
    return value if isinstance(value, str) else str(value)


def _visible_text(content: Any) -> str:
    """The official ``visible_text`` macro: strings, the text of a list of parts, else the value printed."""
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        out = ""
        for item in content:
            if isinstance(item, Mapping) and item.get("type") == "text":
                out += _jinja_str(item.get("text", ""))
            elif isinstance(item, str):
                out += item
        return out
    return _jinja_str(content)


def _off(conv: Conversation, key: str) -> bool:
    """``KEY is defined and not KEY`` in the official template."""
    return key in conv.kwargs and not conv.kwargs[key]


class Glm5Template(Template):
    """The GLM-5 chat template (``[gMASK]<sop>``, ``<|role|>`` turns, hybrid thinking, XML-ish tool calls)."""

    #: The generation config's eos ids: the end of text and the two turns that may follow a reply.
    stop_words = _STOPS
    eos = "<|endoftext|>"
    thinking_switch = True
    response_markers = ("<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>")

    def generation_prompt(self, conv: Conversation) -> str:
        """``<|assistant|><think>`` (``<|assistant|></think>`` with ``enable_thinking=False``)."""
        return "<|assistant|></think>" if _off(conv, "enable_thinking") else "<|assistant|><think>"

    def segments(self, conv: Conversation, add_generation_prompt: bool) -> list[Segment]:
        """Render as ``official/glm5.jinja`` does."""
        messages = conv.messages
        head = "[gMASK]<sop>"
        if conv.tools:
            head += _TOOLS_HEAD + "".join(tojson(tool) + "\n" for tool in conv.tools) + _TOOLS_TAIL
        out: list[Segment] = [prompt(head)]
        last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
        keep_all = _off(conv, "clear_thinking")
        for index, message in enumerate(messages):
            role = message.get("role")
            if role in ("user", "system"):
                text = f"<|{role}|>" + _visible_text(message.get("content"))
            elif role == "assistant":
                out.append(Segment(self._assistant(conv, index, keep_all or index > last_user), "assistant", index))
                continue
            elif role == "tool":
                text = self._tool(conv, index)
            else:
                continue  # any other role renders as nothing, as in the official template
            previous = out[-1]
            header = next((stop for stop in _STOPS[:2] if text.startswith(stop)), None)
            if previous.kind == "assistant" and header:
                # The turn that follows a reply starts with what generation stops at: it ends (and trains) the reply.
                out[-1] = previous._replace(text=previous.text + header)
                text = text[len(header):]
            if text:
                out.append(prompt(text, index))
        if add_generation_prompt:
            out.append(prompt(self.generation_prompt(conv)))
        return out

    def _assistant(self, conv: Conversation, index: int, show_reasoning: bool) -> str:
        message = conv.messages[index]
        content = _visible_text(message.get("content"))
        reasoning = message.get("reasoning_content")
        if not isinstance(reasoning, str):
            reasoning = ""
            if "</think>" in content:
                reasoning = content.split("</think>")[0].rstrip("\n").split("<think>")[-1].lstrip("\n")
                content = content.split("</think>")[-1].lstrip("\n")
        text = "<|assistant|>"
        text += "<think>" + reasoning.strip() + "</think>" if show_reasoning and reasoning else "</think>"
        text += content.strip()
        for call in message.get("tool_calls") or ():
            if isinstance(call, Mapping) and call.get("function"):
                call = call["function"]
            if not isinstance(call, Mapping) or not isinstance(call.get("name"), str):
                raise TemplateError(f"{conv.where(index)}: a tool call needs a string 'name'")
            arguments = call.get("arguments")
            if not isinstance(arguments, Mapping):
                raise TemplateError(
                    f"{conv.where(index)}: tool call {call['name']!r}: 'arguments' must be a mapping (the official "
                    f"template iterates arguments.items()), got {type(arguments).__name__}"
                )
            text += "<tool_call>" + call["name"]
            for key, value in arguments.items():
                shown = value if isinstance(value, str) else tojson(value)
                text += f"<arg_key>{key}</arg_key><arg_value>{shown}</arg_value>"
            text += "</tool_call>"
        return text

    def _tool(self, conv: Conversation, index: int) -> str:
        content = conv.messages[index].get("content")
        if isinstance(content, str):
            first = index == 0 or conv.messages[index - 1].get("role") != "tool"
            return ("<|observation|>" if first else "") + "<tool_response>" + content + "</tool_response>"
        if not isinstance(content, (list, tuple)):
            raise TemplateError(f"{conv.where(index)}: tool content must be a string or a list of results")
        out = "<|observation|>"
        for result in content:
            shown = result["output"] if isinstance(result, Mapping) and "output" in result else result
            out += "<tool_response>" + _jinja_str(shown) + "</tool_response>"
        return out

    def parse_response(self, text: str) -> dict[str, Any]:
        """Reasoning (before ``</think>``), content, and the ``<tool_call>`` blocks; stops at a stop word."""
        for stop in _STOPS:
            text = text.split(stop, 1)[0]
        reasoning, content = split_reasoning(text)
        calls = []
        for name, body in _TOOL_CALL.findall(content):
            arguments = {key.strip(): json_or_text(value) for key, value in _ARG.findall(body)}
            calls.append(tool_call(name.strip(), arguments))
        if calls:
            content = content[: content.find("<tool_call>")].strip()
        return {"content": content, "reasoning_content": reasoning, "tool_calls": calls}
