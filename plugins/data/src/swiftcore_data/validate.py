"""Check a canonical record before it reaches a template: roles, turns, tool calls, media counts.

Every problem is a :class:`DataError` naming the row (``file:line``) and the field in the user's own
terms (``conversations[3].from``, ``messages[2].role``, ``images``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from swiftcore_data.errors import DataError

__all__ = ["MEDIA_TAGS", "ROLES", "count_media_placeholders", "validate_record"]

ROLES = ("system", "user", "assistant", "tool")
# Content part type -> the media column its value counts against (OpenAI spellings included).
PART_MEDIA = {
    "image": "images",
    "image_url": "images",
    "audio": "audios",
    "input_audio": "audios",
    "video": "videos",
    "video_url": "videos",
}
PART_TYPES = ("text", *PART_MEDIA)
# ms-swift style inline placeholders in string content.
MEDIA_TAGS = {"images": "<image>", "audios": "<audio>", "videos": "<video>"}


def validate_record(
    record: Mapping[str, Any],
    where: str,
    origins: Sequence[str] | None = None,
    *,
    turns_field: str = "messages",
    require_assistant: bool = True,
) -> None:
    """Raise a :class:`DataError` for the first problem in a canonical record.

    Args:
        record: the canonical record (see :func:`swiftcore_data.normalize_record`).
        where: ``"file:line"`` for the message.
        origins: per message, the row field it came from (defaults to ``messages[i]``).
        turns_field: the row field named when no assistant turn exists.
        require_assistant: training rows need an assistant turn to learn from; prompts for inference do not.

    Raises:
        DataError: unknown role, misplaced system message, bad content or tool call, a tool message without a
            preceding call, no assistant turn, or media columns that do not match the placeholders.
    """
    messages = record.get("messages")
    if not isinstance(messages, list) or not messages:
        raise DataError(where, turns_field, "no messages; a row needs at least one turn", reason="empty conversation")
    names = list(origins) if origins is not None else [f"messages[{i}]" for i in range(len(messages))]
    for i, message in enumerate(messages):
        _check_message(message, where, names[i], first=i == 0)
    _check_tool_order(messages, where, names)
    if require_assistant and not any(m["role"] == "assistant" for m in messages):
        raise DataError(
            where,
            turns_field,
            "no assistant turn; a training row needs at least one assistant message to learn from",
            reason="no assistant turn",
        )
    _check_extras(record, where)
    _check_media(record, where, names)


def _check_message(message: Any, where: str, name: str, *, first: bool) -> None:
    if not isinstance(message, Mapping):
        raise DataError(where, name, f"expected a message object, got {type(message).__name__}", reason="invalid field")
    role = message.get("role")
    if role not in ROLES:
        raise DataError(
            where,
            f"{name}.role",
            f"unknown role {role!r}; expected one of {', '.join(ROLES)}",
            reason="unknown role",
        )
    if role == "system" and not first:
        raise DataError(
            where, f"{name}.role", "a system message must be the first message", reason="misplaced system message"
        )
    if "content" not in message:
        raise DataError(where, f"{name}.content", "missing", reason="invalid field")
    content = message["content"]
    if isinstance(content, list):
        for j, part in enumerate(content):
            _check_part(part, where, f"{name}.content[{j}]")
    elif not isinstance(content, str):
        raise DataError(
            where,
            f"{name}.content",
            f"expected a string or a list of content parts, got {type(content).__name__}",
            reason="invalid field",
        )
    reasoning = message.get("reasoning_content")
    if reasoning is not None and not isinstance(reasoning, str):
        raise DataError(
            where,
            f"{name}.reasoning_content",
            f"expected a string, got {type(reasoning).__name__}",
            reason="invalid field",
        )
    calls = message.get("tool_calls")
    if calls is not None:
        if role != "assistant":
            raise DataError(
                where,
                f"{name}.tool_calls",
                f"only assistant messages make tool calls, not {role!r}",
                reason="invalid tool call",
            )
        if not isinstance(calls, list):
            raise DataError(where, f"{name}.tool_calls", "expected a list of tool calls", reason="invalid tool call")
        for j, call in enumerate(calls):
            _check_call(call, where, f"{name}.tool_calls[{j}]")


def _check_part(part: Any, where: str, name: str) -> None:
    if not isinstance(part, Mapping) or part.get("type") not in PART_TYPES:
        got = part.get("type") if isinstance(part, Mapping) else type(part).__name__
        raise DataError(
            where,
            f"{name}.type",
            f"unknown content part type {got!r}; expected one of {', '.join(PART_TYPES)}",
            reason="invalid content part",
        )
    if part["type"] == "text" and not isinstance(part.get("text"), str):
        raise DataError(where, f"{name}.text", "a text part needs a string 'text'", reason="invalid content part")


def _check_call(call: Any, where: str, name: str) -> None:
    # OpenAI shape {"type": "function", "function": {"name", "arguments"}}, or the flat {"name", "arguments"}
    # that several chat templates also accept.
    function = call.get("function", call) if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str) or not function["name"]:
        raise DataError(where, name, "a tool call needs function.name (a non-empty string)", reason="invalid tool call")
    arguments = function.get("arguments", {})
    if not isinstance(arguments, str | Mapping):
        raise DataError(
            where,
            f"{name}.function.arguments",
            f"expected a JSON string or an object, got {type(arguments).__name__}",
            reason="invalid tool call",
        )


def _check_tool_order(messages: list[Mapping[str, Any]], where: str, names: list[str]) -> None:
    """Each tool message must answer a call of the nearest preceding assistant message."""
    call_ids: set[str] | None = None  # ids of the calls being answered; None = no open calls
    for i, message in enumerate(messages):
        role = message["role"]
        if role == "assistant":
            calls = message.get("tool_calls") or []
            ids = {c.get("id") for c in calls if isinstance(c, Mapping)}
            call_ids = {x for x in ids if x} if calls else None
        elif role == "tool":
            if call_ids is None:
                raise DataError(
                    where,
                    names[i],
                    "tool message without a preceding assistant tool call; add the assistant message with "
                    "'tool_calls' before it",
                    reason="tool message without a preceding call",
                )
            answered = message.get("tool_call_id")
            if answered is not None and call_ids and answered not in call_ids:
                raise DataError(
                    where,
                    f"{names[i]}.tool_call_id",
                    f"{answered!r} matches no call of the preceding assistant message ({', '.join(sorted(call_ids))})",
                    reason="tool message without a preceding call",
                )
        else:
            call_ids = None


def _check_extras(record: Mapping[str, Any], where: str) -> None:
    tools = record.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, Mapping) for t in tools)):
        raise DataError(where, "tools", "expected a list of tool (function schema) objects", reason="invalid field")
    kwargs = record.get("chat_template_kwargs")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise DataError(where, "chat_template_kwargs", "expected an object", reason="invalid field")


def count_media_placeholders(messages: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Count media placeholders per column: media content parts plus ``<image>``-style tags in text.

    Tags count wherever they appear (any role, string content or text parts), as in ms-swift.

    Args:
        messages: canonical messages.

    Returns:
        ``{"images": n, "audios": n, "videos": n}``.
    """
    parts, tags = _count_media(messages)
    return {column: parts[column] + tags[column] for column in MEDIA_TAGS}


def _count_media(messages: Sequence[Mapping[str, Any]]) -> tuple[dict[str, int], dict[str, int]]:
    """(media content parts, inline tags) per column."""
    parts = dict.fromkeys(MEDIA_TAGS, 0)
    tags = dict.fromkeys(MEDIA_TAGS, 0)
    for message in messages:
        content = message.get("content")
        for part in content if isinstance(content, list) else []:
            column = PART_MEDIA.get(part.get("type"))
            if column:
                parts[column] += 1
        for text in _texts(content):
            for column, tag in MEDIA_TAGS.items():
                tags[column] += text.count(tag)
    return parts, tags


def _check_media(record: Mapping[str, Any], where: str, names: list[str]) -> None:
    parts, tags = _count_media(record["messages"])
    for column, tag in MEDIA_TAGS.items():
        given = record.get(column)
        found = parts[column] + tags[column]
        if given is not None:
            if len(given) != found:
                raise DataError(
                    where,
                    column,
                    f"{len(given)} {column} given but {found} placeholder(s) in the messages ({tag} tags or "
                    f"{column[:-1]} content parts); make them match",
                    reason="media count mismatch",
                )
            continue
        # No column: media parts must carry their own value, and tags have nothing to point at.
        for i, message in enumerate(record["messages"]):
            content = message.get("content")
            for j, part in enumerate(content if isinstance(content, list) else []):
                kind = part.get("type")
                if PART_MEDIA.get(kind) == column and not part.get(kind):
                    raise DataError(
                        where,
                        f"{names[i]}.content[{j}]",
                        f"{kind} part has no {kind!r} value and the row has no {column!r} column",
                        reason="media count mismatch",
                    )
        if tags[column]:
            raise DataError(
                where,
                column,
                f"{tags[column]} {tag} tag(s) in the messages but no {column!r} column; "
                f"add the {column} or remove the tags",
                reason="media count mismatch",
            )


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [p.get("text") or "" for p in content if isinstance(p, Mapping) and p.get("type") == "text"]
    return []
