"""Prompt rows that offer tools or hold tool turns are refused for a template with no tool format, as the ``sft``
recipe refuses them: OLMoE's official chat template renders none of them, so the policy would be prompted without
the tools its rewards expect. The plan step refuses them naming each row's file and line, before any model loads
and before anything is written; a template with a tool format (Qwen3.5) takes the same rows.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}]
CALL = {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
        "function": {"name": "add", "arguments": "{\"a\": 2, \"b\": 2}"}}]}  # fmt: skip
ROWS = [
    {"prompt": "Write a word."},
    {"prompt": "3 plus 4?", "tools": TOOLS},
    {"prompt": "Write a name."},
    {"messages": [{"role": "user", "content": "2 plus 2?"}, CALL, {"role": "tool", "content": "4"}]},
]


@pytest.mark.parametrize("recipe", ["grpo", "rloo"])
def test_tool_prompts_are_refused_without_a_tool_format(
    recipe: str, tiny_model_dir: Any, plugins: Any, tmp_path: Path, vowel: Any
) -> None:
    from swiftcore_data import DataError
    from swiftcore_recipe_rl.plan import plan_run

    data = tmp_path / "tools.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    olmoe, options = vowel(recipe, tiny_model_dir("olmoe"), tmp_path, steps=1, lr=1e-3)
    with pytest.raises(DataError, match="has no tool format") as info:
        plan_run(recipe, dataclasses.replace(olmoe, dataset=(str(data),)), plugins, options)
    message = str(info.value)
    assert f"{data}:2" in message and f"{data}:4" in message and f"{data}:1," not in message
    assert "--agent-template" in message and not (tmp_path / "out").exists()
    qwen, options = vowel(recipe, tiny_model_dir("qwen3_5"), tmp_path, steps=1, lr=1e-3)
    plan = plan_run(recipe, dataclasses.replace(qwen, dataset=(str(data),)), plugins, options)
    assert len(plan.prompts.dataset) == len(ROWS)  # a template that renders tools takes them
