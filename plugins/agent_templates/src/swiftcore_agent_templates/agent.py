"""Agent templates: a family's own chat template with a tool format added (Hermes or ReAct).

An agent template wraps the family's template (its role markers, BOS/EOS, stop words and generation prompt stay the
family's) and changes only what the family's official template drops: the tool schemas become a block of the system
prompt, an assistant turn's ``tool_calls`` become text of that turn (so they are trained), and each ``tool`` message
becomes a user turn carrying the result. The family's template then renders that tool-free conversation, and
:meth:`AgentTemplate.parse_response` reads the calls back into OpenAI ``tool_calls``.

- ``hermes`` (Qwen / NousResearch Hermes style, as Qwen3's official template writes it): the schemas as JSON lines in
  ``<tools></tools>``; a call is ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``; a result is
  ``<tool_response>\\n...\\n</tool_response>`` in a user turn.
- ``react`` (Thought / Action / Action Input / Observation): the schemas as ``name: description Parameters: {...}``
  lines and the ReAct format; a call is ``Action: NAME\\nAction Input: {...}`` (``Thought: ...`` before it when the
  turn has content); a result is ``Observation: ...`` in a user turn. A final answer is the turn's content as is. The
  ``Thought:`` label is markup: the parse drops it from the start of a reply's content (with calls or without), and
  a streaming server drops it too (``content_label``).

A family template that renders no user text (Qwen3-ASR: its user turn holds only audio) is given the text of a user
turn in its own markers (``tool_turn``), placed where the ``tool`` message stands.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar

from swiftcore.api.template import (
    Conversation,
    Segment,
    Template,
    TemplateError,
    json_or_text,
    prompt,
    tojson,
    tool_call,
)

__all__ = ["AgentTemplate", "HermesTemplate", "ReactTemplate"]

# Qwen3's official Hermes tool preamble (template_plugins/qwen's qwen3.py), without its ChatML markers.
_HERMES_HEAD = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "
    "function signatures within <tools></tools> XML tags:\n<tools>"
)
_HERMES_TAIL = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": '
    "<args-json-object>}\n</tool_call>"
)
_HERMES_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.S)
_REACT_CALL = re.compile(r"Action:[ \t]*([^\n]*?)[ \t]*\nAction Input:[ \t]*(.*?)(?=\nAction:|\nObservation:|\Z)", re.S)


class AgentTemplate(Template):
    """A family template with a tool format added (see the module docstring); subclasses say which format.

    Args:
        base: the family's template (built by its own plugin's factory).
        tool_turn: ``str.format`` text of a user turn holding ``{}``, for a family template that does not render
            user text (None: the family renders the tool result as a user message).
    """

    #: The agent format's name (``--agent-template NAME``).
    agent: ClassVar[str] = ""
    #: Where a call starts in generated text (a streaming server holds the reply back from there).
    tool_call_start: ClassVar[str] = ""
    #: The markers the call parser reads (kept in decoded replies even where they are special tokens).
    call_markers: ClassVar[tuple[str, ...]] = ()
    #: A label the parse drops from the start of a reply's content (a streaming server drops it too), or None.
    content_label: ClassVar[str | None] = None

    def __init__(self, base: Template, tool_turn: str | None = None) -> None:
        self.base = base
        self.tool_turn = tool_turn
        self.stop_words = base.stop_words  # type: ignore[misc]
        self.roles = base.roles  # type: ignore[misc]
        self.thinking_switch = base.thinking_switch  # type: ignore[misc]
        self.reasoning_markers = base.reasoning_markers  # type: ignore[misc]
        self.response_markers = (*base.response_markers, *self.call_markers)  # type: ignore[misc]
        if hasattr(base, "bos"):
            self.bos = base.bos

    # ------------------------------------------------------------------ the format (subclasses)

    def tools_block(self, tools: list[Any]) -> str:
        """The system-prompt text that offers ``tools``."""
        raise NotImplementedError

    def calls_text(self, content: str, calls: Sequence[Mapping[str, Any]]) -> str:
        """An assistant turn's text: its ``content`` and its ``calls`` (each ``{"name", "arguments"}``)."""
        raise NotImplementedError

    def result_text(self, content: str) -> str:
        """The user-turn text that carries a tool's result."""
        raise NotImplementedError

    def parse_calls(self, text: str) -> tuple[str, list[dict[str, Any]]] | None:
        """``(content before the calls, OpenAI tool calls)`` of generated text, or None when it calls nothing."""
        raise NotImplementedError

    # ------------------------------------------------------------------ Template

    def to_base(self, conv: Conversation) -> tuple[Conversation, list[int | None]]:
        """``conv`` as the family template can render it (no tools, calls or ``tool`` messages), and for each of
        its messages the index of the message of ``conv`` it comes from (None: the system prompt added for tools)."""
        messages: list[dict[str, Any]] = []
        origin: list[int | None] = []
        for index, message in enumerate(conv.messages):
            role = message.get("role")
            if role == "tool":
                message = {"role": "user", "content": self.result_text(_string(conv, index, message))}
            elif role == "assistant" and message.get("tool_calls"):
                calls = [_function(conv, index, call) for call in message["tool_calls"]]
                message = {**message, "content": self.calls_text(_string(conv, index, message), calls)}
                message.pop("tool_calls")
            messages.append(message)
            origin.append(index)
        if conv.tools:
            block = self.tools_block(conv.tools)
            if messages and messages[0].get("role") == "system":
                messages[0] = {**messages[0], "content": _string(conv, 0, messages[0]) + "\n\n" + block}
            else:
                messages.insert(0, {"role": "system", "content": block})
                origin.insert(0, None)
        return replace(conv, messages=messages, tools=None), origin

    def generation_prompt(self, conv: Conversation) -> str:
        """The family template's generation prompt."""
        return self.base.generation_prompt(self.to_base(conv)[0])

    def segments(self, conv: Conversation, add_generation_prompt: bool) -> list[Segment]:
        """The family template's rendering of :meth:`to_base`'s conversation, its pieces naming ``conv``'s messages;
        a tool result the family does not render is its :attr:`tool_turn`, where the ``tool`` message stands."""
        base_conv, origin = self.to_base(conv)
        pieces = [
            Segment(p.text, p.kind, None if p.message is None else origin[p.message], p.media)
            for p in self.base.segments(base_conv, add_generation_prompt)
        ]
        rendered = {p.message for p in pieces}
        for index, message in enumerate(conv.messages):
            if message.get("role") != "tool" or index in rendered:
                continue
            if self.tool_turn is None:
                raise TemplateError(
                    f"{conv.where(index)}: template {self.base.name!r} renders no user text, so agent template "
                    f"{self.agent!r} has nowhere to put the tool's result"
                )
            # After the last piece of an earlier message (the generation prompt, message None, stays last).
            at = max((k + 1 for k, p in enumerate(pieces) if p.message is not None and p.message < index), default=0)
            pieces.insert(at, prompt(self.tool_turn.format(self.result_text(_string(conv, index, message))), index))
        return pieces

    def stop_words_for(self, tokenizer: Any) -> tuple[str, ...]:
        """The family template's stop words with ``tokenizer``."""
        return self.base.stop_words_for(tokenizer)

    def parse_response(self, text: str) -> dict[str, Any]:
        """The family template's parse of the text before the calls, with the calls as OpenAI ``tool_calls``; the
        content's :attr:`content_label` is dropped."""
        for word in self.stop_words:
            text = text.split(word, 1)[0]
        found = self.parse_calls(text)
        parsed = self.base.parse_response(text if found is None else found[0])
        label, content = self.content_label, parsed.get("content")
        if label and isinstance(content, str) and content.lstrip().startswith(label):
            parsed = {**parsed, "content": content.lstrip()[len(label) :].strip()}
        return parsed if found is None else {**parsed, "tool_calls": found[1]}


class HermesTemplate(AgentTemplate):
    """Hermes tool calls (JSON in ``<tool_call>`` tags) on a family template."""

    agent = "hermes"
    tool_call_start = "<tool_call>"
    call_markers = ("<tool_call>", "</tool_call>")

    def tools_block(self, tools: list[Any]) -> str:
        """``# Tools`` and the schemas in ``<tools></tools>``, as Qwen3's official template writes them."""
        return _HERMES_HEAD + "".join("\n" + tojson(t) for t in tools) + _HERMES_TAIL

    def calls_text(self, content: str, calls: Sequence[Mapping[str, Any]]) -> str:
        """``content``, then each call as ``<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>``."""
        text = content
        for k, call in enumerate(calls):
            if k > 0 or content:
                text += "\n"
            text += '<tool_call>\n{"name": "' + call["name"] + '", "arguments": ' + _arguments(call) + "}\n</tool_call>"
        return text

    def result_text(self, content: str) -> str:
        """``<tool_response>\\nRESULT\\n</tool_response>``."""
        return "<tool_response>\n" + content + "\n</tool_response>"

    def parse_calls(self, text: str) -> tuple[str, list[dict[str, Any]]] | None:
        """Every ``<tool_call>{json}</tool_call>`` (a body that is no JSON object is skipped)."""
        calls = []
        for body in _HERMES_CALL.findall(text):
            try:
                data = json.loads(body)
            except ValueError:
                continue
            if isinstance(data, dict) and isinstance(data.get("name"), str):
                calls.append(tool_call(data["name"], data.get("arguments") or {}))
        if not calls:
            return None
        return text[: text.find(self.tool_call_start)].strip(), calls


class ReactTemplate(AgentTemplate):
    """ReAct tool calls (Thought / Action / Action Input / Observation) on a family template."""

    agent = "react"
    tool_call_start = "Action:"
    content_label = "Thought:"

    def tools_block(self, tools: list[Any]) -> str:
        """The tools as ``name: description Parameters: {...}`` lines, then the ReAct format."""
        functions = [t.get("function", t) if isinstance(t, Mapping) else {} for t in tools]
        lines = [
            f"{f.get('name')}: {f.get('description', '')} Parameters: {tojson(f.get('parameters', {}))}"
            for f in functions
        ]
        names = ", ".join(str(f.get("name")) for f in functions)
        return (
            "Answer the following questions as best you can. You have access to the following tools:\n\n"
            + "\n".join(lines)
            + "\n\nUse the following format:\n\nThought: you should always think about what to do\n"
            f"Action: the action to take, should be one of [{names}]\n"
            "Action Input: the input to the action, a JSON object\nObservation: the result of the action\n"
            "... (this Thought/Action/Action Input/Observation can repeat)\n\n"
            "When you know the final answer, reply with it alone."
        )

    def calls_text(self, content: str, calls: Sequence[Mapping[str, Any]]) -> str:
        """``Thought: CONTENT`` (when there is content), then ``Action: NAME\\nAction Input: {...}`` per call."""
        lines = [f"Thought: {content}"] if content else []
        lines += [f"Action: {call['name']}\nAction Input: {_arguments(call)}" for call in calls]
        return "\n".join(lines)

    def result_text(self, content: str) -> str:
        """``Observation: RESULT``."""
        return "Observation: " + content

    def parse_calls(self, text: str) -> tuple[str, list[dict[str, Any]]] | None:
        """Every ``Action:`` / ``Action Input:`` pair whose input is a JSON object; the thought before them is the
        content (its ``Thought:`` label dropped by :meth:`~AgentTemplate.parse_response`)."""
        calls = []
        for name, raw in _REACT_CALL.findall(text):
            arguments = json_or_text(raw.strip())
            if name and isinstance(arguments, dict):
                calls.append(tool_call(name, arguments))
        if not calls:
            return None
        return text[: text.find(self.tool_call_start)].strip(), calls


def _string(conv: Conversation, index: int, message: Mapping[str, Any]) -> str:
    """A message's content as text (None is empty, as OpenAI's clients send a call turn's content)."""
    content = message.get("content")
    if content is None:
        return ""
    if not isinstance(content, str):
        raise TemplateError(
            f"{conv.where(index)}: agent templates take string content in system, tool and tool-calling assistant "
            f"messages, got {type(content).__name__}"
        )
    return content


def _function(conv: Conversation, index: int, call: Any) -> dict[str, Any]:
    """``{"name", "arguments"}`` of an OpenAI tool call (``{"function": {...}}`` or the function itself)."""
    function = call.get("function", call) if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        raise TemplateError(f"{conv.where(index)}: each tool call needs a function name")
    return {"name": function["name"], "arguments": function.get("arguments") or {}}


def _arguments(call: Mapping[str, Any]) -> str:
    arguments = call["arguments"]
    return arguments if isinstance(arguments, str) else tojson(arguments)
