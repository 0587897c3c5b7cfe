"""Gemma 4: reproduces ``official/gemma4.jinja`` (Google's updated template, 2026-04/05).

Turns are ``<|turn>ROLE\\n ... <turn|>\\n`` with role ``model`` for the assistant. Tool calls and the
responses of the tool messages that follow are rendered inside the model turn; a model turn whose
tool calls got responses but no text stays open and the next assistant message continues it.

A reply of several rounds (calls, their results, then an answer, in one model turn) cannot be trained as one
sequence: serving asks the first round after the generation prompt (``<|turn>model\\n<|channel>thought\\n<channel|>``
with thinking off) but each later round after the history as the official template renders it, where that empty
thought channel is gone. :meth:`Gemma4Template.training_rounds` splits such a record into one record per round,
each trained on exactly the prompt serving renders for it.
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
    prompt,
    tool_call,
)
from swiftcore_template_gemma.declarations import (
    Q,
    dictsort,
    format_argument,
    format_declaration,
    format_tool_response,
)

__all__ = ["ROUND_KEY", "Gemma4Template"]

_MEDIA = {"image": "<|image|>", "audio": "<|audio|>", "video": "<|video|>"}
#: The roles Gemma 4 renders a turn for (``developer`` is a system turn).
_ROLES = ("system", "developer", "user", "assistant", "tool")
#: ``chat_template_kwargs`` key :meth:`Gemma4Template.training_rounds` sets on a later round's record: in training,
#: only its last assistant message is trained, and the earlier rounds render as history (as serving renders them).
ROUND_KEY = "swiftcore_train_last_round"
_CALL = re.compile(r"<\|tool_call>call:([^{]+)\{(.*?)\}<tool_call\|>", re.S)


def strip_thinking(text: str) -> str:
    """The official ``strip_thinking`` macro: drop ``<|channel>...<channel|>`` blocks, then trim."""
    if "<channel|>" not in text and "<|channel>" not in text:  # the common case: nothing to drop
        return text.strip()
    out = ""
    for part in text.split("<channel|>"):
        out += part.split("<|channel>")[0] if "<|channel>" in part else part
    return out.strip()


class Gemma4Template(Template):
    """The Gemma 4 chat template (updated official version)."""

    stop_words = ("<turn|>", "<|tool_response>")
    thinking_switch = True
    reasoning_markers = ("<|channel>thought\n", "<channel|>")
    response_markers = ("<|tool_call>", "<tool_call|>", "<|tool_response>", Q)
    tool_call_start = "<|tool_call>"
    bos = "<bos>"

    def generation_prompt(self, conv: Conversation) -> str:
        """``<|turn>model\\n``, plus an empty thought channel unless thinking is on."""
        return "<|turn>model\n" + ("" if conv.kwargs.get("enable_thinking") else "<|channel>thought\n<channel|>")

    def _system_text(self, content: Any) -> str:
        if isinstance(content, str):
            return content.strip()
        if isinstance(content, (list, tuple)):
            return "".join(str(item.get("text", "")).strip() + " " for item in content)
        return ""

    def check_messages(self, conv: Conversation) -> None:
        """Refuse what the official template would render into a broken prompt: a role Gemma 4 has no turn
        for, or content that is neither text nor a list of parts (the template would drop it silently)."""
        for index, message in enumerate(conv.messages):
            role = message.get("role")
            if role not in _ROLES:
                raise TemplateError(
                    f"{conv.where(index)}: role {role!r} has no Gemma 4 turn; use one of {', '.join(_ROLES)}"
                )
            content = message.get("content")
            if content is not None and not isinstance(content, (str, list, tuple)):
                raise TemplateError(
                    f"{conv.where(index)}: content must be a string or a list of parts, got {type(content).__name__}"
                )

    def segments(self, conv: Conversation, add_generation_prompt: bool) -> list[Segment]:
        """Render as ``official/gemma4.jinja`` does."""
        messages = conv.messages
        if not messages:
            raise TemplateError(f"{conv.where()}: no messages to render (the official template indexes messages[0])")
        self.check_messages(conv)
        thinking = bool(conv.kwargs.get("enable_thinking"))
        out: list[Segment] = [prompt(self.bos)]
        state: str | None = None
        offset = 0
        first_role = messages[0].get("role")
        if thinking or conv.tools or first_role in ("system", "developer"):
            text = "<|turn>system\n"
            if thinking:
                text += "<|think|>\n"
                state = "think"
            if first_role in ("system", "developer"):
                text += self._system_text(messages[0].get("content"))
                offset = 1
            if conv.tools:
                text += "".join("<|tool>" + format_declaration(tool) + "<tool|>" for tool in conv.tools)
                state = "tool"
            out.append(prompt(text + "<turn|>\n", 0 if offset else None))
        last_user = -1
        for index in range(len(messages) - 1, offset - 1, -1):
            if messages[index].get("role") == "user":
                last_user = index
                break
        # a later round's record (training_rounds): only its last message is trained
        trained_from = len(messages) - 1 if conv.training and conv.kwargs.get(ROUND_KEY) else 0
        previous_role = None
        for index in range(offset, len(messages)):
            message = messages[index]
            role_in = message.get("role")
            if role_in == "tool":
                continue
            if role_in == "assistant":
                pieces, state = self._model_turn(
                    conv, index, previous_role == "assistant", index > last_user, index >= trained_from
                )
            else:
                pieces, state = self._turn(conv, index, str(role_in))
            out += pieces
            previous_role = role_in
        if add_generation_prompt and state not in ("tool_response", "tool_call"):
            out.append(prompt(self.generation_prompt(conv)))
        return out

    def _content(self, conv: Conversation, index: int, model: bool) -> tuple[list[Segment], str | None]:
        content = conv.messages[index].get("content")
        last_media = None
        if isinstance(content, str):
            return [prompt(strip_thinking(content) if model else content.strip(), index)], None
        pieces: list[Segment] = []
        if isinstance(content, (list, tuple)):
            for item in content:
                kind = item.get("type")
                if kind == "text":
                    text = str(item.get("text", ""))
                    pieces.append(prompt(strip_thinking(text) if model else text.strip(), index))
                elif kind in _MEDIA:
                    pieces.append(media(_MEDIA[kind], kind, item, index))
                    last_media = kind
        return pieces, last_media

    def _turn(self, conv: Conversation, index: int, role: str) -> tuple[list[Segment], str | None]:
        content = conv.messages[index].get("content")
        if isinstance(content, str):  # the common case: the whole turn is one prompt piece
            return [prompt("<|turn>" + role + "\n" + content.strip() + "<turn|>\n", index)], None
        pieces, last_media = self._content(conv, index, model=False)
        return [prompt(f"<|turn>{role}\n", index), *pieces, prompt("<turn|>\n", index)], last_media

    def _model_turn(
        self, conv: Conversation, index: int, continues: bool, after_user: bool, trained: bool = True
    ) -> tuple[list[Segment], str | None]:
        message = conv.messages[index]
        chunks: list[tuple[str, bool]] = [] if continues else [("<|turn>model\n", True)]
        state = None
        calls = message.get("tool_calls")
        thinking_text = message.get("reasoning") or message.get("reasoning_content")
        # The official template shows thinking only before tool calls; a reply being trained (train/serve
        # rule, swiftcore.template.base) keeps it, in the same form, as the model generates it.
        thought = ""
        if thinking_text and after_user and (calls or (conv.training and trained)):
            thought = "<|channel>thought\n" + str(thinking_text) + "\n<channel|>"
            chunks.append((thought, True))
        raw = message.get("content")
        if not calls and not message.get("tool_responses") and isinstance(raw, str):
            # The common case (a text reply, no tools): every chunk is trained, so the turn is one piece
            # and its trailer, as the general path below merges it.
            head, kind = ("", "answer") if continues else ("<|turn>model\n", "assistant")
            if not trained:
                return [prompt(head + thought + strip_thinking(raw) + "<turn|>\n", index)], None
            return [Segment(head + thought + strip_thinking(raw) + "<turn|>", kind, index), prompt("\n", index)], None
        if calls:
            chunks.append(("".join(self._call(conv, index, call) for call in calls), True))
            state = "tool_call"
        responded = False
        if message.get("tool_responses"):
            for response in message["tool_responses"]:
                chunks.append(
                    (format_tool_response(str(response.get("name", "unknown")), response.get("response")), False)
                )
                responded, state = True, "tool_response"
        elif calls:
            for follow in conv.messages[index + 1 :]:
                if follow.get("role") != "tool":
                    break
                chunks.append((format_tool_response(self._tool_name(calls, follow), self._tool_body(follow)), False))
                responded, state = True, "tool_response"
        if isinstance(raw, str):
            content, last_media = strip_thinking(raw), None
        else:
            pieces, last_media = self._content(conv, index, model=True)
            content = "".join([p.text for p in pieces])
        if last_media:
            state = last_media
        chunks.append((content, True))
        trailer = ""
        if state == "tool_call" and not responded:
            chunks.append(("<|tool_response>", True))
        elif not (responded and not content.strip()):
            chunks.append(("<turn|>", True))
            trailer = "\n"
        # '<|tool_response>' right after the calls is what the model generates to hand over to the tool
        # (the official template writes it alone for an unanswered call): it is trained, the response not.
        if not trained:  # an earlier round of a later round's record: history, as serving renders it
            chunks = [(text, False) for text, _ in chunks]
        for k, (text, learn) in enumerate(chunks):
            if trained and not learn and text.startswith("<|tool_response>"):
                chunks[k : k + 1] = [("<|tool_response>", True), (text[len("<|tool_response>") :], False)]
                break
        segments = self._merge(chunks, index, header=not continues)
        if trailer:
            segments.append(prompt(trailer, index))
        return segments, state

    def training_rounds(self, record: Mapping[str, Any] | list) -> list[Mapping[str, Any] | list]:
        """The records a training record is encoded as: one per round of its reply.

        A reply (the assistant messages after the last user message) of one round comes back unchanged. A reply
        of several rounds (``assistant`` with tool calls, the ``tool`` results, ..., the final ``assistant``) gives
        one record per round, cut after that round's assistant message: the first is trained as usual (history
        turns and the first round, after the generation prompt); each later one carries :data:`ROUND_KEY`, so only
        its last round is trained, after the earlier rounds rendered as the official template renders them for
        serving. Every record keeps the whole reply's thinking mode (:meth:`thinking_mode`), so each trained span
        follows exactly the prompt ``render(history, add_generation_prompt=True)`` gives in that mode.

        Args:
            record: a training record (``{"messages": [...], ...}`` or a list of messages).

        Returns:
            The records, in order (``[record]`` when the reply has one round).
        """
        messages = list(record.get("messages") or []) if isinstance(record, Mapping) else list(record)
        last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
        rounds = [i for i in range(last_user + 1, len(messages)) if messages[i].get("role") == "assistant"]
        if len(rounds) < 2:
            return [record]
        base = dict(record) if isinstance(record, Mapping) else {"messages": messages}
        kwargs = dict(base.get("chat_template_kwargs") or {})
        if self.thinking_switch:
            kwargs["enable_thinking"] = self.thinking_mode(record)
        out: list[Mapping[str, Any] | list] = []
        for k, end in enumerate(rounds):
            extra = {ROUND_KEY: True} if k else {}
            out.append({**base, "messages": messages[: end + 1], "chat_template_kwargs": {**kwargs, **extra}})
        return out

    def _merge(self, chunks: list[tuple[str, bool]], index: int, header: bool) -> list[Segment]:
        merged: list[list[Any]] = []
        for text, trained in chunks:
            if not text:
                continue
            if merged and merged[-1][1] == trained:
                merged[-1][0] += text
            else:
                merged.append([text, trained])
        out = []
        first = True
        for text, trained in merged:
            if trained:
                out.append(Segment(text, "assistant" if first and header else "answer", index))
                first = False
            else:
                out.append(prompt(text, index))
        return out

    def _call(self, conv: Conversation, index: int, call: Any) -> str:
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping):
            raise TemplateError(
                f"{conv.where(index)}: gemma4 needs tool calls as {{'function': {{'name', 'arguments'}}}}"
            )
        arguments = function.get("arguments")
        if isinstance(arguments, Mapping):
            body = ",".join(str(k) + ":" + format_argument(v, escape_keys=False) for k, v in dictsort(arguments))
        elif isinstance(arguments, str):
            body = arguments
        else:
            body = ""
        return "<|tool_call>call:" + str(function.get("name")) + "{" + body + "}<tool_call|>"

    def _tool_name(self, calls: list, follow: Mapping[str, Any]) -> str:
        name = follow.get("name") or "unknown"
        for call in calls:
            if call.get("id") == follow.get("tool_call_id"):
                name = call["function"]["name"]
        return str(name)

    def _tool_body(self, follow: Mapping[str, Any]) -> Any:
        body = follow.get("content")
        if isinstance(body, (list, tuple)):
            return "".join(str(p.get("text", "")) for p in body if p.get("type") == "text")
        return body

    def parse_response(self, text: str) -> dict[str, Any]:
        """Thought channel, content and ``<|tool_call>call:NAME{k:v}<tool_call|>`` calls."""
        text = text.split("<turn|>", 1)[0].split("<|tool_response>", 1)[0]
        reasoning = None
        if "<channel|>" in text:
            thought, _, text = text.partition("<channel|>")
            reasoning = thought.split("<|channel>", 1)[-1].removeprefix("thought\n").strip() or None
        calls = []
        for name, body in _CALL.findall(text):
            arguments = {}
            for pair in re.finditer(r"(\w+):(" + re.escape(Q) + r".*?" + re.escape(Q) + r"|[^,]*)", body):
                value = pair.group(2)
                arguments[pair.group(1)] = value[len(Q) : -len(Q)] if value.startswith(Q) else json_or_text(value)
            calls.append(tool_call(name.strip(), arguments))
        content = _CALL.sub("", text).strip()
        return {"content": content, "reasoning_content": reasoning, "tool_calls": calls}
