"""Tool rows (``tools``, ``tool_calls``, a ``tool`` turn) are refused for a template with no tool format, as the
``sft`` recipe refuses them: OLMoE's official chat template renders none of them, so the tool-call reply would train
as an empty one. Every preference recipe reads its rows through ``prepare`` (KTO through its own loader); the error
names the file and line of each offending row, before any model loads. A template with a tool format (Qwen3.5)
takes the same rows.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from swiftcore_train import TrainConfig

TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}]
CALL = {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
        "function": {"name": "add", "arguments": "{\"a\": 3, \"b\": 4}"}}]}  # fmt: skip
ROWS = [
    {"prompt": "say apple", "chosen": "apple", "rejected": "pear"},
    {"prompt": "3 plus 4?", "chosen": [CALL], "rejected": "8", "tools": TOOLS},
    {"prompt": "greet me", "chosen": "hello", "rejected": "go away"},
    {"prompt": "4 plus 4?", "chosen": "8", "rejected": "9", "tools": TOOLS},
]


def _cfg(model: Path, data: Path, tmp_path: Path, recipe: str) -> TrainConfig:
    return TrainConfig(model=str(model), dataset=(str(data),), output_dir=str(tmp_path / "out"), recipe=recipe,
                       plot=False, val_dataset=(str(data),))  # fmt: skip


@pytest.mark.parametrize("recipe", ["dpo", "orpo", "rm"])
def test_tool_pairs_are_refused_without_a_tool_format(recipe, tmp_path, tiny_model_dir, plugins, write_jsonl) -> None:
    from swiftcore_data import DataError
    from swiftcore_recipe_preference.common import prepare

    data = write_jsonl(ROWS)
    with pytest.raises(DataError, match="has no tool format") as info:
        prepare(_cfg(tiny_model_dir("olmoe"), data, tmp_path, recipe), plugins, recipe)
    message = str(info.value)
    assert f"{data}:2" in message and f"{data}:4" in message and f"{data}:1," not in message
    assert "--agent-template" in message
    pairs = prepare(_cfg(tiny_model_dir("qwen3_5"), data, tmp_path, recipe), plugins, recipe).train
    assert len(pairs) == len(ROWS)  # a template that renders tools takes them


def test_kto_tool_rows_are_refused_without_a_tool_format(tmp_path, tiny_model_dir, plugins, write_jsonl) -> None:
    from swiftcore_data import DataError
    from swiftcore_recipe_preference.kto import run_kto

    data = write_jsonl(ROWS)
    with pytest.raises(DataError, match="has no tool format") as info:
        run_kto(_cfg(tiny_model_dir("olmoe"), data, tmp_path, "kto"), plugins)
    assert f"{data}:2" in str(info.value)
    assert not (tmp_path / "out").exists()  # refused before the run started
