"""``swiftcore infer`` on a JSONL file, in-process through click (the real command, the real engine)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from swiftcore.cli.main import cli

PLUGINS = ["--plugin", "swiftcore_testing.engines", "--plugin", "template_qwen"]


@pytest.fixture(autouse=True)
def _no_env_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    # The CLI exports its plugin set to SWIFTCORE_PLUGINS (for child processes); setenv first so that
    # monkeypatch restores the variable's absence after the test, whatever the command wrote.
    monkeypatch.setenv("SWIFTCORE_PLUGINS", "")
    monkeypatch.delenv("SWIFTCORE_PLUGINS")


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_infer_file_answers_good_records_and_reports_bad_ones(tiny_qwen3: Path, engine: Any, tmp_path: Path) -> None:
    good = {"id": "a", "messages": [{"role": "user", "content": "Is 4 even?"}]}
    with_answer = {
        "id": "b",
        "messages": [{"role": "user", "content": "Is 5 even?"}, {"role": "assistant", "content": "odd"}],
    }
    source = _write(
        tmp_path / "in.jsonl",
        [
            json.dumps(good),
            "{not json",
            json.dumps(with_answer),
            json.dumps({"id": "c", "messages": [{"role": 3}]}),
            "",
        ],
    )
    target = tmp_path / "out.jsonl"
    result = CliRunner().invoke(
        cli,
        [
            *PLUGINS,
            "infer",
            "--model",
            str(tiny_qwen3),
            "--input",
            str(source),
            "--output",
            str(target),
            "--max-new-tokens",
            "6",
            "--batch-size",
            "2",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "answered 2, failed 2" in result.output
    rows = [json.loads(line) for line in target.read_text().splitlines()]
    assert len(rows) == 4
    expected = engine.generate([good, {"messages": with_answer["messages"][:1]}], max_new_tokens=6)
    assert rows[0]["id"] == "a" and rows[0]["response"] == expected[0].content
    assert rows[0]["usage"] == {
        "prompt_tokens": expected[0].prompt_tokens,
        "completion_tokens": expected[0].completion_tokens,
    }
    assert rows[0]["finish_reason"] == expected[0].finish_reason
    assert "in.jsonl:2" in rows[1]["error"] and "JSON" in rows[1]["error"]
    assert rows[2]["labels"] == "odd" and rows[2]["response"] == expected[1].content  # asked without the answer
    assert rows[3]["id"] == "c" and "role" in rows[3]["error"]


def test_unavailable_backend_says_why(tiny_qwen3: Path, tmp_path: Path) -> None:
    source = _write(tmp_path / "in.jsonl", [json.dumps({"messages": [{"role": "user", "content": "hi"}]})])
    result = CliRunner().invoke(
        cli, [*PLUGINS, "infer", "--model", str(tiny_qwen3), "--input", str(source), "--backend", "nosuch"]
    )
    assert result.exit_code != 0
    assert "nosuch" in str(result.exception) and "swiftcore-backend-<name>" in str(result.exception)
    assert "pip install" not in str(result.exception)


def test_interactive_chat(tiny_qwen3: Path, engine: Any) -> None:
    result = CliRunner().invoke(
        cli, [*PLUGINS, "infer", "--model", str(tiny_qwen3), "--max-new-tokens", "5"], input="hello\n/exit\n"
    )
    assert result.exit_code == 0, result.output
    expected = engine.generate([{"messages": [{"role": "user", "content": "hello"}]}], max_new_tokens=5)[0]
    assert f"assistant> {expected.text}" in result.output


def test_merge_lora_gives_the_adapter_answers(
    trained_lora: Path, engine: Any, infer_plugins: Any, tmp_path: Path
) -> None:
    record = {"messages": [{"role": "user", "content": "Is 9 even or odd?"}]}
    source = _write(tmp_path / "in.jsonl", [json.dumps(record)])
    out = {}
    for flag in ([], ["--merge-lora"]):
        target = tmp_path / f"out{len(flag)}.jsonl"
        result = CliRunner().invoke(
            cli,
            [
                *PLUGINS,
                "infer",
                "--model",
                str(trained_lora),
                "--input",
                str(source),
                "--output",
                str(target),
                "--max-new-tokens",
                "6",
                *flag,
            ],
        )
        assert result.exit_code == 0, result.output
        out[len(flag)] = json.loads(target.read_text())["response"]
    assert out[0] == out[1]


def test_merge_lora_helper_writes_a_plain_checkpoint(trained_lora: Path, infer_plugins: Any, tmp_path: Path) -> None:
    from swiftcore_infer.merge import merge_lora
    from swiftcore_infer.transformers_engine import TransformersEngine

    merged = merge_lora(trained_lora, tmp_path / "merged", infer_plugins, dtype="float32")
    assert not (merged / "adapter_config.json").exists() and (merged / "config.json").exists()
    records = [{"messages": [{"role": "user", "content": "Is 9 even or odd?"}]}]
    assert (
        TransformersEngine(merged, infer_plugins).generate(records, max_new_tokens=6)[0].token_ids
        == TransformersEngine(trained_lora, infer_plugins).generate(records, max_new_tokens=6)[0].token_ids
    )
