"""Records in, normalised conversations out: the one place that knows the input format.

A record is ``{"messages": [...], "tools": [...]?, "chat_template_kwargs": {...}?, "id": ...?}`` in the
OpenAI chat format. Normalising makes two OpenAI-isms look the way the official Jinja templates expect
(tool-call ``arguments`` given as a JSON string become a mapping; content parts that are all text become
one string), so a Python template and the official template see the same input.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from swiftcore.template.errors import TemplateError

__all__ = ["MEDIA_TYPES", "Conversation", "generation_record", "media_type", "normalize_record", "tojson"]

MEDIA_TYPES = ("image", "video", "audio")


@dataclass
class Conversation:
    """A normalised record.

    Attributes:
        messages: the messages (copies; never the caller's dicts).
        tools: the tool schemas, or None.
        kwargs: the per-sample ``chat_template_kwargs`` (``enable_thinking`` ...).
        record_id: the record's ``id``, for error messages.
        training: rendered for training: the reply (the assistant turns after the last user message) is
            written as the model generates it after the generation prompt (see :meth:`Template.layout`),
            so a template may render what the official template drops from past turns (reasoning).
    """

    messages: list[dict[str, Any]]
    tools: list[Any] | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    record_id: Any = None
    training: bool = False

    def where(self, index: int | None = None) -> str:
        """A location for error messages: ``record 's1-003', message 2``."""
        out = f"record {self.record_id!r}" if self.record_id is not None else "record"
        return out if index is None else f"{out}, message {index}"


def tojson(value: Any, indent: int | None = None) -> str:
    """JSON the way transformers' chat-template ``tojson`` filter writes it (non-ASCII kept)."""
    return json.dumps(value, ensure_ascii=False, indent=indent)


def media_type(item: Mapping[str, Any]) -> str | None:
    """The media type of a content part (``image``/``video``/``audio``), or None for text and others."""
    kind = item.get("type")
    if kind in MEDIA_TYPES:
        return kind
    if kind == "image_url" or "image_url" in item:
        return "image"
    if kind == "input_audio" or "audio_url" in item:
        return "audio"
    if kind == "video_url" or "video_url" in item:
        return "video"
    for name in MEDIA_TYPES:
        if name in item:
            return name
    return None


def normalize_record(record: Mapping[str, Any] | list) -> Conversation:
    """Validate a record and normalise it (see the module docstring).

    Args:
        record: a record dict, or a bare list of messages.

    Returns:
        The :class:`Conversation`.

    Raises:
        TemplateError: no messages, a message that is not a mapping, a bad ``tools`` or
            ``chat_template_kwargs`` field, or tool-call arguments that are not valid JSON.
    """
    if isinstance(record, list):
        record = {"messages": record}
    if not isinstance(record, Mapping):
        raise TemplateError(f"a record must be a mapping with 'messages', got {type(record).__name__}")
    conv = Conversation(messages=[], record_id=record.get("id"))
    messages = record.get("messages")
    if not isinstance(messages, list):
        raise TemplateError(f"{conv.where()}: field 'messages' must be a list of messages, got {messages!r:.60}")
    tools = record.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise TemplateError(f"{conv.where()}: field 'tools' must be a list of tool schemas")
    kwargs = record.get("chat_template_kwargs") or {}
    if not isinstance(kwargs, Mapping):
        raise TemplateError(f"{conv.where()}: field 'chat_template_kwargs' must be a mapping")
    conv.tools = tools
    conv.kwargs = dict(kwargs)
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise TemplateError(f"{conv.where(index)}: a message must be a mapping with 'role' and 'content'")
        conv.messages.append(_normalize_message(dict(message), conv, index))
    return conv


def _normalize_message(message: dict[str, Any], conv: Conversation, index: int) -> dict[str, Any]:
    role = message.get("role")
    if not isinstance(role, str):
        raise TemplateError(f"{conv.where(index)}: field 'role' is missing or not a string")
    content = message.get("content")
    if isinstance(content, list):
        if not all(isinstance(part, Mapping) for part in content):
            raise TemplateError(f"{conv.where(index)}: content parts must be mappings like {{'type': 'text', ...}}")
        # All-text parts are one string to every official template we reproduce (they concatenate them),
        # and templates that only take strings (qwen3) would raise on the list.
        if content and all(
            part.get("type", "text") == "text" and "text" in part and media_type(part) is None for part in content
        ):
            message["content"] = "".join(str(part["text"]) for part in content)
    tool_calls = message.get("tool_calls")
    if isinstance(tool_calls, list):
        message["tool_calls"] = [_normalize_tool_call(call, conv, index) for call in tool_calls]
    return message


def _normalize_tool_call(call: Any, conv: Conversation, index: int) -> Any:
    if not isinstance(call, Mapping):
        raise TemplateError(f"{conv.where(index)}: each tool call must be a mapping")
    call = dict(call)
    function = call.get("function")
    target = dict(function) if isinstance(function, Mapping) else call
    arguments = target.get("arguments")
    if isinstance(arguments, str):
        try:
            target["arguments"] = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            name = target.get("name", "?")
            raise TemplateError(
                f"{conv.where(index)}: tool call {name!r}: 'arguments' is not valid JSON ({exc}); "
                "give a JSON object string or a mapping"
            ) from exc
    if isinstance(function, Mapping):
        call["function"] = target
    return call


def generation_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """The record with its trailing assistant turns dropped (the prompt for ``add_generation_prompt``)."""
    out = dict(record)
    messages = list(record["messages"])
    while messages and messages[-1].get("role") == "assistant":
        messages.pop()
    out["messages"] = messages
    return out
