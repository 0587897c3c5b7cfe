"""DeepSeek-V4: the official encoding (``official/ENCODING.md``), as a swiftcore template.

DeepSeek-V4 ships no Jinja template; its encoding is a Python reference implementation described in
``official/ENCODING.md`` with golden input/output pairs. What this template reproduces:

- ``<｜begin▁of▁sentence｜>``, then the system prompt bare, ``<｜User｜>`` turns, ``<｜latest_reminder｜>``;
  a ``developer`` message is a user turn.
- After a user/developer turn that an assistant turn (or nothing) follows: ``<｜Assistant｜>`` plus
  ``<think>`` (thinking mode) or ``</think>`` (chat mode). So the prompt of a conversation that ends
  with a user or tool message always ends with the assistant prefix.
- Thinking mode: ``chat_template_kwargs`` ``thinking_mode="thinking"`` or ``enable_thinking=True``.
  ``drop_thinking`` (default True) drops reasoning (and developer messages) before the last user
  turn, unless any message carries tools.
- Tools (a record's top-level ``tools`` go to its system message) render the DSML instructions and
  the function schemas; tool calls are DSML ``invoke`` blocks; tool messages merge into one user turn
  of ``<tool_result>`` blocks, ordered like the calls.
- ``reasoning_effort="max"`` (thinking mode) puts the effort preamble before the first message;
  ``task`` on a message adds the quick-instruction token.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from swiftcore.api.template import Conversation, Segment, Template, TemplateError, prompt, tool_call

__all__ = ["BOS", "EOS", "DeepseekV4Template"]

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
USER = "<｜User｜>"
ASSISTANT = "<｜Assistant｜>"
REMINDER = "<｜latest_reminder｜>"
DSML = "｜DSML｜"
TASKS = {"action": "<｜action｜>", "query": "<｜query｜>", "authority": "<｜authority｜>", "domain": "<｜domain｜>",
         "title": "<｜title｜>", "read_url": "<｜read_url｜>"}
EFFORT_MAX = (
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root "
    "cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial "
    "scenarios.\nExplicitly write out your entire deliberation process, documenting every intermediate step, "
    "considered alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n"
)
TOOLS_HEADER = (
    "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can invoke tools by "
    f'writing a "<{DSML}tool_calls>" block like the following:\n\n<{DSML}tool_calls>\n<{DSML}invoke '
    f'name="$TOOL_NAME">\n<{DSML}parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE'
    f"</{DSML}parameter>\n...\n</{DSML}invoke>\n<{DSML}invoke name=\"$TOOL_NAME2\">\n...\n</{DSML}invoke>\n"
    f"</{DSML}tool_calls>\n\nString parameters should be specified as is and set `string=\"true\"`. For all other "
    "types (numbers, booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside "
    "<think>...</think> BEFORE any tool calls or final response.\n\nOtherwise, output directly after </think> "
    "with tool calls or final response.\n\n### Available Tool Schemas\n\n"
)
TOOLS_FOOTER = "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n"
_INVOKE = re.compile(rf'<{DSML}invoke name="(.*?)">\n(.*?)</{DSML}invoke>', re.S)
_PARAM = re.compile(rf'<{DSML}parameter name="(.*?)" string="(true|false)">(.*?)</{DSML}parameter>', re.S)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def render_tools(tools: list[Any]) -> str:
    """The tools section: DSML instructions and one JSON schema (the ``function`` object) per line."""
    return TOOLS_HEADER + "\n".join(_json(t["function"]) for t in tools) + TOOLS_FOOTER


def render_tool_calls(calls: list[Any]) -> str:
    """``\\n\\n<｜DSML｜tool_calls>`` ... with one ``invoke`` per call (strings raw, the rest JSON)."""
    invokes = []
    for call in calls:
        function = call["function"]
        arguments = function.get("arguments") or {}
        if isinstance(arguments, str):
            arguments = json.loads(arguments)
        params = "\n".join(
            f'<{DSML}parameter name="{key}" string="{"true" if isinstance(value, str) else "false"}">'
            f"{value if isinstance(value, str) else _json(value)}</{DSML}parameter>"
            for key, value in arguments.items()
        )
        invokes.append(f'<{DSML}invoke name="{function.get("name")}">\n{params}\n</{DSML}invoke>')
    return f"\n\n<{DSML}tool_calls>\n" + "\n".join(invokes) + f"\n</{DSML}tool_calls>"


class DeepseekV4Template(Template):
    """The DeepSeek-V4 encoding (chat and thinking modes, DSML tool calls)."""

    stop_words = (EOS,)
    roles = ("system", "user", "assistant", "tool", "developer", "latest_reminder")
    thinking_switch = True
    response_markers = (DSML,)
    tool_call_start = f"<{DSML}tool_calls>"

    def requested_thinking(self, conv: Conversation) -> bool | None:
        """``thinking_mode`` ("chat"/"thinking") or ``enable_thinking``; None when neither is given."""
        if conv.kwargs.get("thinking_mode") is None and conv.kwargs.get("enable_thinking") is None:
            return None
        return self.thinking(conv)

    @staticmethod
    def thinking(conv: Conversation) -> bool:
        """Thinking mode: ``thinking_mode="thinking"`` or ``enable_thinking=True`` in the kwargs."""
        mode = conv.kwargs.get("thinking_mode")
        if mode is not None:
            if mode not in ("chat", "thinking"):
                raise TemplateError(f"{conv.where()}: thinking_mode must be 'chat' or 'thinking', got {mode!r}")
            return mode == "thinking"
        return bool(conv.kwargs.get("enable_thinking"))

    def generation_prompt(self, conv: Conversation) -> str:
        """``<｜Assistant｜>`` and the thinking token (the encoding adds it after the last user turn)."""
        return ASSISTANT + ("<think>" if self.thinking(conv) else "</think>")

    # ------------------------------------------------------------------ preprocessing

    def _messages(self, conv: Conversation) -> list[dict[str, Any]]:
        """Copies with ``_index`` (the original position), tools attached, tool results merged and sorted."""
        messages = []
        for index, message in enumerate(conv.messages):
            role = message.get("role")
            if role not in self.roles:
                raise TemplateError(f"{conv.where(index)}: Unknown role {role!r} (deepseek_v4 takes "
                                    f"{', '.join(self.roles)})")
            content = message.get("content")
            if content is not None and not isinstance(content, str) and role != "tool":
                raise TemplateError(f"{conv.where(index)}: deepseek_v4 is text-only; content must be a string "
                                    "(media parts are not supported)")
            messages.append({**message, "_index": index})
        if conv.tools:
            system = next((m for m in messages if m["role"] == "system"), None)
            if system is None:  # the encoding reads tools from a system/developer message: give it one
                system = {"role": "system", "content": "", "_index": None}
                messages.insert(0, system)
            system["tools"] = conv.tools
        merged: list[dict[str, Any]] = []
        order: dict[str, int] = {}
        for message in messages:
            role = message["role"]
            if role == "assistant" and message.get("tool_calls"):
                order = {c.get("id"): k for k, c in enumerate(message["tool_calls"]) if c.get("id")}
            if role == "tool":
                block = {"type": "tool_result", "id": message.get("tool_call_id", ""),
                         "content": message.get("content")}
                last = merged[-1] if merged else None
                if last is not None and last["role"] == "user" and "blocks" in last:
                    last["blocks"].append(block)
                    last["order"] = order
                else:
                    merged.append({"role": "user", "blocks": [block], "order": order, "_index": message["_index"]})
            elif role == "user":
                block = {"type": "text", "text": message.get("content") or ""}
                last = merged[-1] if merged else None
                if last is not None and last["role"] == "user" and "blocks" in last and last.get("task") is None:
                    last["blocks"].append(block)
                    last["_index"] = message["_index"]
                else:
                    kept = {k: message[k] for k in ("task", "wo_eos") if k in message}
                    merged.append({"role": "user", "blocks": [block], "_index": message["_index"], **kept})
            else:
                merged.append(message)
        for message in merged:
            results = [b for b in message.get("blocks", ()) if b["type"] == "tool_result"]
            if len(results) > 1 and message.get("order"):
                ranked = iter(sorted(results, key=lambda b: message["order"].get(b["id"], 0)))
                message["blocks"] = [next(ranked) if b["type"] == "tool_result" else b for b in message["blocks"]]
        return merged

    # ------------------------------------------------------------------ rendering

    def segments(self, conv: Conversation, add_generation_prompt: bool) -> list[Segment]:
        """Render as the official encoding does (``add_generation_prompt`` changes nothing: the prefix
        after a final user turn is always there, and an assistant turn ends the text)."""
        thinking = self.thinking(conv)
        effort = conv.kwargs.get("reasoning_effort")
        if effort not in (None, "max", "high", "low"):
            raise TemplateError(f"{conv.where()}: reasoning_effort must be 'max', 'high', 'low' or None, got "
                                f"{effort!r}")
        messages = self._messages(conv)
        drop = conv.kwargs.get("drop_thinking", True) and not any(m.get("tools") for m in messages)
        if thinking and drop:  # developer messages before the last user turn go (their reasoning is not shown)
            last_user = _last_user(messages)
            messages = [m for i, m in enumerate(messages) if not (m["role"] == "developer" and i < last_user)]
        last_user = _last_user(messages)
        out: list[Segment] = [prompt(BOS)]
        if messages and thinking and effort == "max":
            out.append(prompt(EFFORT_MAX))
        for i in range(len(messages)):
            out += self._message(conv, messages, i, thinking, drop, last_user)
        return out

    def _message(self, conv: Conversation, messages: list, i: int, thinking: bool, drop: bool,
                 last_user: int) -> list[Segment]:
        message = messages[i]
        role, index = message["role"], message["_index"]
        content = message.get("content") or ""
        out: list[Segment] = []
        if role in ("system", "developer"):
            if role == "developer" and not content:
                raise TemplateError(f"{conv.where(index)}: a developer message needs content")
            text = (USER if role == "developer" else "") + content
            if message.get("tools"):
                text += "\n\n" + render_tools(message["tools"])
            if message.get("response_format"):
                text += ("\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n"
                         + _json(message["response_format"]))
            out.append(prompt(text, index))
        elif role == "user":
            parts = [self._block(b) for b in message["blocks"]]
            out.append(prompt(USER + "\n\n".join(parts), index))
        elif role == "latest_reminder":
            out.append(prompt(REMINDER + content, index))
        elif role == "assistant":
            previous_task = i > 0 and messages[i - 1].get("task") is not None
            think = ""
            if thinking and not previous_task and (not drop or i > last_user):
                think = (message.get("reasoning_content") or message.get("reasoning") or "") + "</think>"
            calls = render_tool_calls(message["tool_calls"]) if message.get("tool_calls") else ""
            end = "" if message.get("wo_eos") else EOS
            out.append(Segment(think + content + calls + end, "assistant", index))
        following = messages[i + 1]["role"] if i + 1 < len(messages) else None
        if following is not None and following not in ("assistant", "latest_reminder"):
            return out
        task = message.get("task")
        if task is not None:
            if task not in TASKS:
                raise TemplateError(f"{conv.where(index)}: unknown task {task!r}; one of {', '.join(TASKS)}")
            if task == "action":
                out.append(prompt(ASSISTANT + ("<think>" if thinking else "</think>") + TASKS[task], index))
            else:
                out.append(prompt(TASKS[task], index))
        elif role in ("user", "developer"):
            opens = thinking and (not drop or i >= last_user)
            out.append(prompt(ASSISTANT + ("<think>" if opens else "</think>"), index))
        return out

    @staticmethod
    def _block(block: Mapping[str, Any]) -> str:
        if block["type"] == "text":
            return str(block["text"])
        body = block.get("content") or ""
        if isinstance(body, list):
            body = "\n\n".join(str(b.get("text", "")) if b.get("type") == "text" else f"[Unsupported {b.get('type')}]"
                               for b in body)
        return f"<tool_result>{body}</tool_result>"

    # ------------------------------------------------------------------ parsing

    def parse_response(self, text: str) -> dict[str, Any]:
        """Reasoning (before ``</think>``), content and DSML tool calls of one generated turn."""
        text = text.split(EOS, 1)[0]
        reasoning = None
        if "</think>" in text:
            reasoning, _, text = text.partition("</think>")
            reasoning = reasoning.removeprefix("<think>")
        content, _, block = text.partition(f"\n\n<{DSML}tool_calls>")
        calls = []
        for name, body in _INVOKE.findall(block):
            arguments = {key: value if flag == "true" else _json_or_text(value)
                         for key, flag, value in _PARAM.findall(body)}
            calls.append(tool_call(name, arguments))
        return {"content": content, "reasoning_content": reasoning, "tool_calls": calls}


def _json_or_text(value: str) -> Any:
    """A ``string="false"`` parameter's JSON value; its text as written when the model wrote no valid JSON there (a
    generated reply is never an error: the caller sees what the model wrote instead of a failed request)."""
    try:
        return json.loads(value)
    except ValueError:
        return value


def _last_user(messages: list[dict[str, Any]]) -> int:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i]["role"] in ("user", "developer"):
            return i
    return -1
