"""Convert the row formats people train on into the canonical ``messages`` record.

Accepted row shapes (detected by their columns, in this order):

- ``messages`` (or ``conversations`` with ``role``/``content``): already canonical; copied.
- ShareGPT: ``conversations`` with ``from``/``value`` turns (``human``, ``gpt``, ``system``,
  ``function_call``, ``observation``), optional top-level ``system`` and ``tools``.
- Alpaca: ``instruction`` [+ ``input``] -> user, ``output`` -> assistant, optional ``system`` and
  ``history`` (``[[query, response], ...]``).
- Query/response: ``query``/``response`` (also ``prompt``/``completion``, ``question``/``answer``),
  optional ``system`` and ``history``.

Every converter also returns, for each canonical message, the field it came from in the user's row
(``"conversations[3]"``, ``"output"``), so validation errors name what the user wrote.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from swiftcore_data.errors import DataError

__all__ = ["MEDIA_COLUMNS", "convert_row", "detect_format"]

MEDIA_COLUMNS = ("images", "audios", "videos")
# Message keys renamed to the canonical one (other keys are kept as they are).
_MESSAGE_KEY_ALIASES: dict[str, str] = {"thinking": "reasoning_content", "reasoning": "reasoning_content"}
SHAREGPT_ROLES = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "function_call": "assistant",
    "observation": "tool",
    "tool": "tool",
}
QUERY_RESPONSE_KEYS = (("query", "response"), ("prompt", "completion"), ("question", "answer"))

Origins = list[str]


def _present(row: Mapping[str, Any], key: str) -> bool:
    # Parquet / HF rows carry every column of the schema; a None there means "absent".
    return row.get(key) is not None


def detect_format(row: Mapping[str, Any]) -> str | None:
    """Name the format of ``row``: ``"messages"``, ``"sharegpt"``, ``"alpaca"``, ``"query_response"`` or None."""
    if _present(row, "messages"):
        return "messages"
    for key in ("conversations", "conversation"):
        turns = row.get(key)
        if isinstance(turns, list):
            first = next((t for t in turns if isinstance(t, Mapping)), {})
            return "messages" if "role" in first and "from" not in first else "sharegpt"
    if _present(row, "instruction"):
        return "alpaca"
    if any(_present(row, q) for q, _ in QUERY_RESPONSE_KEYS):
        return "query_response"
    return None


def convert_row(row: Mapping[str, Any], where: str) -> tuple[dict[str, Any], Origins, str]:
    """Convert one row to the canonical record, without validating its conversation.

    Args:
        row: the row as read from the file or dataset.
        where: ``"file:line"`` for error messages.

    Returns:
        ``(record, origins, turns_field)``: the canonical record; per message, the row field it came from;
        and the row field that holds (or should hold) the assistant's answer, e.g. ``"messages"``,
        ``"conversations"`` or ``"output"``.

    Raises:
        DataError: the row is not an object, its format is not recognised, or a field has the wrong shape.
    """
    if not isinstance(row, Mapping):
        raise DataError(
            where, None, f"expected a JSON object per row, got {type(row).__name__}", reason="not an object"
        )
    fmt = detect_format(row)
    if fmt is None:
        raise DataError(
            where,
            None,
            f"unrecognized row format (columns: {', '.join(map(str, row)) or 'none'}); expected 'messages', "
            "'conversations' (ShareGPT), 'instruction'/'input'/'output' (Alpaca) or 'query'/'response'",
            reason="unrecognized row format",
        )
    messages, origins, turns_field = _CONVERTERS[fmt](row, where)
    record: dict[str, Any] = {"messages": messages}
    _copy_extras(row, record, where)
    return record, origins, turns_field


# ----------------------------------------------------------------------------------------- messages


def _from_messages(row: Mapping[str, Any], where: str) -> tuple[list[dict[str, Any]], Origins, str]:
    key = next(k for k in ("messages", "conversations", "conversation") if _present(row, k))
    turns = row[key]
    if not isinstance(turns, list):
        raise DataError(where, key, f"expected a list of messages, got {type(turns).__name__}", reason="invalid field")
    messages, origins = [], []
    for i, turn in enumerate(turns):
        field = f"{key}[{i}]"
        if not isinstance(turn, Mapping):
            raise DataError(
                where, field, f"expected a message object, got {type(turn).__name__}", reason="invalid field"
            )
        # Drop None values: parquet rows carry every key any message has (tool_calls=None, ...).
        message = {_MESSAGE_KEY_ALIASES.get(str(k), str(k)): v for k, v in turn.items() if v is not None}
        if message.get("content") is None and message.get("tool_calls"):
            message["content"] = ""  # OpenAI writes null content next to tool calls
        messages.append(message)
        origins.append(field)
    _prepend_system(row, messages, origins, where)
    return messages, origins, key


# ----------------------------------------------------------------------------------------- sharegpt


def _from_sharegpt(row: Mapping[str, Any], where: str) -> tuple[list[dict[str, Any]], Origins, str]:
    key = "conversations" if "conversations" in row else "conversation"
    messages: list[dict[str, Any]] = []
    origins: Origins = []
    pending_calls: list[str] = []  # names of tool calls not yet answered, in order
    for i, turn in enumerate(row[key]):
        field = f"{key}[{i}]"
        if not isinstance(turn, Mapping):
            raise DataError(where, field, f"expected a turn object, got {type(turn).__name__}", reason="invalid field")
        source_role, value = turn.get("from"), turn.get("value")
        if source_role not in SHAREGPT_ROLES:
            raise DataError(
                where,
                f"{field}.from",
                f"unknown role {source_role!r}; expected one of {', '.join(SHAREGPT_ROLES)}",
                reason="unknown role",
            )
        if source_role == "function_call":
            calls = _parse_function_calls(value, where, f"{field}.value")
            pending_calls = [c["function"]["name"] for c in calls]
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and not last.get("tool_calls"):
                last["tool_calls"] = calls  # a "gpt" thought followed by its call is one assistant turn
            else:
                messages.append({"role": "assistant", "content": "", "tool_calls": calls})
                origins.append(field)
            continue
        if not isinstance(value, str):
            raise DataError(
                where, f"{field}.value", f"expected a string, got {type(value).__name__}", reason="invalid field"
            )
        message: dict[str, Any] = {"role": SHAREGPT_ROLES[source_role], "content": value}
        if message["role"] == "tool" and pending_calls:
            message["name"] = pending_calls.pop(0)
        messages.append(message)
        origins.append(field)
    _prepend_system(row, messages, origins, where)
    return messages, origins, key


def _json_problem(exc: json.JSONDecodeError | RecursionError) -> str:
    """What is wrong with a JSON string: the decoder's message, or that it nests past the recursion limit."""
    return exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"


def _parse_function_calls(value: Any, where: str, field: str) -> list[dict[str, Any]]:
    """ShareGPT ``function_call`` values are JSON ``{"name", "arguments"}`` objects (or lists of them)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (json.JSONDecodeError, RecursionError) as exc:
            problem = f"function_call value is not valid JSON ({_json_problem(exc)})"
            raise DataError(where, field, problem, reason="invalid tool call") from None
    calls = value if isinstance(value, list) else [value]
    out = []
    for call in calls:
        if not isinstance(call, Mapping) or not isinstance(call.get("name"), str):
            raise DataError(
                where,
                field,
                'function_call must be {"name": ..., "arguments": ...} (or a list of those)',
                reason="invalid tool call",
            )
        out.append({"type": "function", "function": {"name": call["name"], "arguments": call.get("arguments", {})}})
    return out


# ------------------------------------------------------------------------------ alpaca, query/response


def _from_alpaca(row: Mapping[str, Any], where: str) -> tuple[list[dict[str, Any]], Origins, str]:
    instruction, extra = row["instruction"], row.get("input")
    if not isinstance(instruction, str):
        raise DataError(
            where, "instruction", f"expected a string, got {type(instruction).__name__}", reason="invalid field"
        )
    if extra is not None and not isinstance(extra, str):
        raise DataError(where, "input", f"expected a string, got {type(extra).__name__}", reason="invalid field")
    query = f"{instruction}\n{extra}" if extra else instruction
    return _single_turn(row, where, query, "instruction", row.get("output"), "output")


def _from_query_response(row: Mapping[str, Any], where: str) -> tuple[list[dict[str, Any]], Origins, str]:
    query_key, response_key = next((q, r) for q, r in QUERY_RESPONSE_KEYS if _present(row, q))
    query = row[query_key]
    if not isinstance(query, str):
        raise DataError(where, query_key, f"expected a string, got {type(query).__name__}", reason="invalid field")
    return _single_turn(row, where, query, query_key, row.get(response_key), response_key)


def _single_turn(
    row: Mapping[str, Any], where: str, query: str, query_key: str, response: Any, response_key: str
) -> tuple[list[dict[str, Any]], Origins, str]:
    messages: list[dict[str, Any]] = []
    origins: Origins = []
    history = row.get("history") or []
    if not isinstance(history, list):
        raise DataError(where, "history", "expected a list of [query, response] pairs", reason="invalid field")
    for i, pair in enumerate(history):
        if not (isinstance(pair, list | tuple) and len(pair) == 2 and all(isinstance(t, str) for t in pair)):
            raise DataError(
                where, f"history[{i}]", "expected a [query, response] pair of strings", reason="invalid field"
            )
        messages += [{"role": "user", "content": pair[0]}, {"role": "assistant", "content": pair[1]}]
        origins += [f"history[{i}][0]", f"history[{i}][1]"]
    messages.append({"role": "user", "content": query})
    origins.append(query_key)
    if response is not None:
        if not isinstance(response, str):
            raise DataError(
                where, response_key, f"expected a string, got {type(response).__name__}", reason="invalid field"
            )
        messages.append({"role": "assistant", "content": response})
        origins.append(response_key)
    _prepend_system(row, messages, origins, where)
    return messages, origins, response_key


# ------------------------------------------------------------------------------------------ shared


def _prepend_system(row: Mapping[str, Any], messages: list[dict[str, Any]], origins: Origins, where: str) -> None:
    system = row.get("system")
    if system is None or system == "":
        return
    if not isinstance(system, str):
        raise DataError(where, "system", f"expected a string, got {type(system).__name__}", reason="invalid field")
    if messages and messages[0].get("role") == "system":
        raise DataError(
            where,
            "system",
            "the row has both a 'system' column and a leading system message; keep one",
            reason="duplicate system",
        )
    messages.insert(0, {"role": "system", "content": system})
    origins.insert(0, "system")


def _copy_extras(row: Mapping[str, Any], record: dict[str, Any], where: str) -> None:
    """Copy tools, chat_template_kwargs, media columns and id into the canonical record."""
    tools = row.get("tools")
    if isinstance(tools, str):  # ShareGPT and many HF datasets store tools as a JSON string
        try:
            tools = json.loads(tools) if tools.strip() else None
        except (json.JSONDecodeError, RecursionError) as exc:
            raise DataError(where, "tools", f"not valid JSON ({_json_problem(exc)})", reason="invalid field") from None
    if tools:
        record["tools"] = tools
    kwargs = row.get("chat_template_kwargs")
    if kwargs is not None:
        record["chat_template_kwargs"] = kwargs
    for column in MEDIA_COLUMNS:
        value = row.get(column)
        if value is None:
            continue
        # A single path / URL / decoded image (HF Image feature) is one item; lists and tuples are many.
        record[column] = list(value) if isinstance(value, list | tuple) else [value]
    if row.get("id") is not None:
        record["id"] = row["id"]


_CONVERTERS = {
    "messages": _from_messages,
    "sharegpt": _from_sharegpt,
    "alpaca": _from_alpaca,
    "query_response": _from_query_response,
}
