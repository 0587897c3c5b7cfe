"""Gemma 4, launch template: reproduces ``official/gemma4_launch.jinja`` (the template Gemma 4 shipped with).

Differences from the updated template (:mod:`swiftcore_template_gemma.gemma4`): every message is its own
turn (tool messages become ``<|turn>tool`` turns; only legacy ``tool_responses`` render inside the model
turn), ``<|think|>`` has no newline, images and videos are wrapped in blank lines, no reasoning is
rendered, and the generation prompt always gets the empty thought channel when thinking is off.
"""

from __future__ import annotations

from typing import Any

from swiftcore.api.template import Conversation, Segment, TemplateError, media, prompt
from swiftcore_template_gemma.declarations import format_declaration, format_tool_response
from swiftcore_template_gemma.gemma4 import Gemma4Template, strip_thinking

__all__ = ["Gemma4LaunchTemplate"]

_MEDIA = {"image": ("\n\n", "<|image|>", "\n\n"), "audio": ("", "<|audio|>", ""),
          "video": ("\n\n", "<|video|>", "\n\n")}


class Gemma4LaunchTemplate(Gemma4Template):
    """The Gemma 4 launch chat template."""

    def generation_prompt(self, conv: Conversation) -> str:
        """``<|turn>model\\n``, plus an empty thought channel unless thinking is on."""
        return "<|turn>model\n" + ("" if conv.kwargs.get("enable_thinking") else "<|channel>thought\n<channel|>")

    def segments(self, conv: Conversation, add_generation_prompt: bool) -> list[Segment]:
        """Render as ``official/gemma4_launch.jinja`` does."""
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
                text += "<|think|>"
                state = "think"
            if first_role in ("system", "developer"):
                text += str(messages[0].get("content")).strip()
                offset = 1
            if conv.tools:
                text += "".join("<|tool>" + format_declaration(tool, launch=True) + "<tool|>" for tool in conv.tools)
                state = "tool"
            out.append(prompt(text + "<turn|>\n", 0 if offset else None))
        for index in range(offset, len(messages)):
            pieces, state = self._launch_turn(conv, index)
            out += pieces
        if add_generation_prompt:
            if state != "tool_response":
                out.append(prompt("<|turn>model\n"))
            if not thinking:
                out.append(prompt("<|channel>thought\n<channel|>"))
        return out

    def _launch_content(self, conv: Conversation, index: int, model: bool) -> tuple[list[Segment], str | None]:
        content = conv.messages[index].get("content")
        if isinstance(content, str):
            return [prompt(strip_thinking(content) if model else content.strip(), index)], None
        pieces: list[Segment] = []
        last_media = None
        if isinstance(content, (list, tuple)):
            for item in content:
                kind = item.get("type")
                if kind == "text":
                    text = str(item.get("text", ""))
                    pieces.append(prompt(strip_thinking(text) if model else text.strip(), index))
                elif kind in _MEDIA:
                    before, placeholder, after = _MEDIA[kind]
                    pieces += [prompt(before, index), media(placeholder, kind, item, index), prompt(after, index)]
                    last_media = kind
        return [p for p in pieces if p.text], last_media

    def _launch_turn(self, conv: Conversation, index: int) -> tuple[list[Segment], str | None]:
        message = conv.messages[index]
        model = message.get("role") == "assistant"
        role = "model" if model else str(message.get("role"))
        state = None
        closes = not (message.get("tool_responses") and not message.get("content"))
        if not model:
            pieces, last_media = self._launch_content(conv, index, model=False)
            tail = [prompt("<turn|>\n", index)] if closes else []
            return [prompt(f"<|turn>{role}\n", index), *pieces, *tail], last_media
        chunks: list[tuple[str, bool]] = [("<|turn>model\n", True)]
        thinking_text = message.get("reasoning") or message.get("reasoning_content")
        if thinking_text and conv.training and all(m.get("role") != "user" for m in conv.messages[index + 1 :]):
            # the official launch template renders no reasoning; a reply being trained keeps it as generated
            chunks.append(("<|channel>thought\n" + str(thinking_text) + "\n<channel|>", True))
        calls = message.get("tool_calls")
        if calls:
            chunks.append(("".join(self._call(conv, index, call) for call in calls), True))
            state = "tool_call"
        if message.get("tool_responses"):
            for response in message["tool_responses"]:
                chunks.append((format_tool_response(str(response.get("name", "unknown")), response.get("response")),
                               False))
            state = "tool_response"
        pieces, last_media = self._launch_content(conv, index, model=True)
        chunks.append(("".join(p.text for p in pieces), True))
        if last_media:
            state = last_media
        if closes:
            chunks.append(("<turn|>", True))
        segments = self._merge(chunks, index, header=True)
        if closes:
            segments.append(prompt("\n", index))
        return segments, state

    def parse_response(self, text: str) -> dict[str, Any]:
        """As for gemma4."""
        return super().parse_response(text)
