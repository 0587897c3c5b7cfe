"""Refuse tool rows for a template that has no tool format (they would train an empty assistant turn).

A family whose official chat template never reads ``tools``, ``tool_calls`` or ``tool`` messages (OLMoE, Qwen3-ASR)
renders a tool row's schemas, call and result as nothing: its tool-call turn trains as an empty reply. Such rows are
refused with the file and line of each, and the way out: an agent template (``--agent-template hermes``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from swiftcore_data.errors import DataError

__all__ = ["is_tool_row", "refuse_tool_rows"]

#: How many offending rows the error names (the count covers them all).
_SHOWN = 3


def is_tool_row(record: Mapping[str, Any]) -> bool:
    """Whether a canonical record offers tools, calls one or holds a tool's result."""
    if record.get("tools"):
        return True
    return any(
        isinstance(m, Mapping) and (m.get("role") == "tool" or m.get("tool_calls"))
        for m in record.get("messages") or ()
    )


def refuse_tool_rows(records: Iterable[Mapping[str, Any]], template: str) -> None:
    """Refuse ``records`` that are tool rows when ``template`` has no tool format.

    Args:
        records: canonical records (from :func:`~swiftcore_data.load_records`, each with its ``_source`` file:line).
        template: the name of the template they would be rendered with (one whose official chat template renders
            no tools).

    Raises:
        DataError: naming the first offending rows (``file:line``), the template, and ``--agent-template hermes``.
    """
    bad = [str(r.get("_source", "record")) for r in records if is_tool_row(r)]
    if not bad:
        return
    more = f" (and {len(bad) - _SHOWN} more)" if len(bad) > _SHOWN else ""
    raise DataError(
        ", ".join(bad[:_SHOWN]) + more,
        None,
        f"a tool row (tools, tool_calls or a 'tool' message) but template {template!r} has no tool format: its "
        "official chat template renders none of them, so the tool-call turn would train as an empty reply",
        reason="tool row without a tool format",
        hint="pass --agent-template hermes (or react) from swiftcore-plugin-agent-templates, which renders tools in "
        f"{template!r}'s own turns, or drop the tool rows",
    )
