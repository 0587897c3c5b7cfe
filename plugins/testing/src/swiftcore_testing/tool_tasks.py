"""The add(a, b) tool task the agents' end-to-end tests train and serve (tests/test_agents_e2e.py for the families
with a tool format, swiftcore-plugin-agent-templates' test_agent_e2e.py for the agent templates).

Each row is one full tool loop in the OpenAI tool format: ``user: What is A plus B?`` -> ``assistant`` calling
``add(a=A, b=B)`` -> ``tool: A+B`` -> ``assistant: A+B``, with ``tools=[add]``. Plain data: importing this module
imports no torch or transformers.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["ADD_TOOL", "TOOL_PAIRS", "tool_question", "tool_rows"]

#: The ``(a, b)`` of each row.
TOOL_PAIRS: list[tuple[int, int]] = [(3, 4), (12, 30), (5, 8), (21, 9)]
#: The one tool offered: ``add(a, b)``, an OpenAI function tool.
ADD_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}


def tool_question(a: int, b: int) -> list[dict[str, Any]]:
    """The conversation a served model is asked: the user's question only."""
    return [{"role": "user", "content": f"What is {a} plus {b}?"}]


def tool_rows(pairs: list[tuple[int, int]] | None = None) -> list[dict[str, Any]]:
    """The tool task in the OpenAI tool format: one row per pair (default :data:`TOOL_PAIRS`), each a full tool
    loop (the question, the call, the tool's result, the answer)."""
    rows = []
    for i, (a, b) in enumerate(TOOL_PAIRS if pairs is None else pairs):
        call = {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": "add", "arguments": json.dumps({"a": a, "b": b})},
        }
        rows.append({"tools": [ADD_TOOL], "messages": [
            *tool_question(a, b),
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{i}", "content": str(a + b)},
            {"role": "assistant", "content": str(a + b)},
        ]})  # fmt: skip
    return rows
