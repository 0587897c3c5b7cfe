"""One row in any supported format -> one validated canonical record."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from swiftcore_data.formats import convert_row
from swiftcore_data.validate import validate_record

__all__ = ["normalize_record"]


def normalize_record(
    row: Mapping[str, Any], where: str | None = None, *, require_assistant: bool = True
) -> dict[str, Any]:
    """Convert a row (messages, ShareGPT, Alpaca or query/response) to the canonical record and validate it.

    The canonical record is what templates consume::

        {"messages": [{"role": "system" | "user" | "assistant" | "tool", "content": str | [parts],
                       "reasoning_content"?: str, "tool_calls"?: [...], "tool_call_id"?: str, "name"?: str}],
         "tools"?: [...], "chat_template_kwargs"?: {...}, "images"?: [...], "audios"?: [...],
         "videos"?: [...], "id"?: ..., "_source": "file:line"}

    Args:
        row: the row as read from a file or dataset.
        where: ``"file:line"`` naming the row in error messages; stored as ``_source``. Defaults to the
            row's own ``_source`` (re-normalizing a canonical record keeps it) or ``"<row>"``.
        require_assistant: reject rows without an assistant turn (True for training data).

    Returns:
        A new canonical record (``row`` is not modified).

    Raises:
        DataError: the row's format is not recognised or it fails validation; the message names ``where``
            and the field.

    Examples:
        >>> normalize_record({"instruction": "Add", "input": "2+2", "output": "4"}, "a.jsonl:1")["messages"]
        [{'role': 'user', 'content': 'Add\\n2+2'}, {'role': 'assistant', 'content': '4'}]
    """
    if where is None:
        where = str(row.get("_source", "<row>")) if isinstance(row, Mapping) else "<row>"
    record, origins, turns_field = convert_row(row, where)
    validate_record(record, where, origins, turns_field=turns_field, require_assistant=require_assistant)
    record["_source"] = where
    return record
