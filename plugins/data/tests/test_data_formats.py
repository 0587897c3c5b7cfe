"""Row formats -> canonical records (normalize_record)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from swiftcore_data import DataError, detect_format, normalize_record

# A copy of the project's reference corpus (shared/reference/conversations.jsonl): every message shape.
# The reference corpus the template engine is tested on too.
REFERENCE = Path(__file__).resolve().parents[3] / "core" / "tests" / "fixtures" / "conversations.jsonl"


def _reference_rows() -> list[dict]:
    return [json.loads(line) for line in REFERENCE.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_reference_corpus_is_canonical_and_kept_verbatim() -> None:
    rows = _reference_rows()
    assert len(rows) > 10
    for i, row in enumerate(rows, start=1):
        record = normalize_record(row, f"conversations.jsonl:{i}")
        assert record["messages"] == row["messages"]
        for key in ("tools", "chat_template_kwargs", "id"):
            assert record.get(key) == row.get(key)
        assert record["_source"] == f"conversations.jsonl:{i}"
        assert "tags" not in record  # unknown top-level columns are dropped


def test_renormalizing_keeps_the_source() -> None:
    record = normalize_record({"instruction": "i", "output": "o"}, "a.jsonl:3")
    assert normalize_record(record) == record


def test_normalize_does_not_modify_the_row() -> None:
    row = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}], "system": "S"}
    before = json.dumps(row)
    normalize_record(row)
    assert json.dumps(row) == before


def test_alpaca_with_input_system_and_history() -> None:
    row = {
        "system": "Be brief.",
        "history": [["Hi", "Hello!"]],
        "instruction": "Translate to German",
        "input": "cat",
        "output": "Katze",
    }
    assert detect_format(row) == "alpaca"
    assert normalize_record(row, "a.jsonl:1")["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Translate to German\ncat"},
        {"role": "assistant", "content": "Katze"},
    ]


def test_alpaca_without_input() -> None:
    record = normalize_record({"instruction": "Say hi", "input": "", "output": "hi"})
    assert record["messages"] == [{"role": "user", "content": "Say hi"}, {"role": "assistant", "content": "hi"}]


def test_alpaca_without_output_names_the_output_field() -> None:
    with pytest.raises(DataError, match=r"^a\.jsonl:4: output: no assistant turn"):
        normalize_record({"instruction": "Say hi"}, "a.jsonl:4")
    # Prompts for inference need no answer.
    assert normalize_record({"instruction": "Say hi"}, require_assistant=False)["messages"] == [
        {"role": "user", "content": "Say hi"}
    ]


@pytest.mark.parametrize(
    ("query_key", "response_key"), [("query", "response"), ("prompt", "completion"), ("question", "answer")]
)
def test_query_response_rows(query_key: str, response_key: str) -> None:
    row = {query_key: "2+2?", response_key: "4", "system": "math", "images": "a.png"}
    row[query_key] = "<image>2+2?"
    record = normalize_record(row, "q.jsonl:1")
    assert record["messages"] == [
        {"role": "system", "content": "math"},
        {"role": "user", "content": "<image>2+2?"},
        {"role": "assistant", "content": "4"},
    ]
    assert record["images"] == ["a.png"]  # a single path becomes a one-item list


def test_sharegpt_with_tools_function_call_and_observation() -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    row = {
        "system": "You have tools.",
        "tools": json.dumps(tools),
        "conversations": [
            {"from": "human", "value": "Weather in Paris?"},
            {"from": "gpt", "value": "Let me check."},
            {"from": "function_call", "value": '{"name": "get_weather", "arguments": {"city": "Paris"}}'},
            {"from": "observation", "value": '{"temp": 21}'},
            {"from": "gpt", "value": "21 degrees."},
        ],
    }
    assert detect_format(row) == "sharegpt"
    record = normalize_record(row, "s.jsonl:1")
    assert record["tools"] == tools
    assert record["messages"] == [
        {"role": "system", "content": "You have tools."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "Let me check.",
            "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
        },
        {"role": "tool", "content": '{"temp": 21}', "name": "get_weather"},
        {"role": "assistant", "content": "21 degrees."},
    ]


def test_sharegpt_function_call_without_thought_becomes_its_own_turn() -> None:
    row = {
        "conversations": [
            {"from": "human", "value": "q"},
            {"from": "function_call", "value": [{"name": "a", "arguments": "{}"}, {"name": "b", "arguments": "{}"}]},
            {"from": "observation", "value": "ra"},
            {"from": "observation", "value": "rb"},
            {"from": "gpt", "value": "done"},
        ]
    }
    messages = normalize_record(row)["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "assistant"]
    assert [c["function"]["name"] for c in messages[1]["tool_calls"]] == ["a", "b"]
    assert [messages[2]["name"], messages[3]["name"]] == ["a", "b"]


def test_sharegpt_unknown_role_names_conversations_field() -> None:
    row = {"conversations": [{"from": "human", "value": "q"}, {"from": "bot", "value": "a"}]}
    with pytest.raises(DataError, match=r"^s\.jsonl:3: conversations\[1\]\.from: unknown role 'bot'") as info:
        normalize_record(row, "s.jsonl:3")
    assert info.value.reason == "unknown role"


def test_sharegpt_bad_function_call_json() -> None:
    row = {"conversations": [{"from": "human", "value": "q"}, {"from": "function_call", "value": "{not json"}]}
    with pytest.raises(DataError, match=r"conversations\[1\]\.value: function_call value is not valid JSON"):
        normalize_record(row, "s.jsonl:1")


def test_conversations_with_role_content_is_messages_format() -> None:
    row = {"conversations": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}
    assert detect_format(row) == "messages"
    assert normalize_record(row)["messages"] == row["conversations"]


def test_messages_drop_none_values_and_map_aliases() -> None:
    # What a parquet row looks like: every key of any message, None where absent.
    row = {
        "messages": [
            {"role": "user", "content": "q", "tool_calls": None, "reasoning_content": None},
            {"role": "assistant", "content": "a", "tool_calls": None, "thinking": "hmm"},
            {"role": "user", "content": "q2", "tool_calls": None, "reasoning_content": None},
            {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "content": "r", "tool_calls": None},
            {"role": "assistant", "content": "ok"},
        ],
        "tools": None,
        "images": None,
        "chat_template_kwargs": {"enable_thinking": True},
    }
    record = normalize_record(row)
    assert record["messages"][0] == {"role": "user", "content": "q"}
    assert record["messages"][1] == {"role": "assistant", "content": "a", "reasoning_content": "hmm"}
    assert record["messages"][3]["content"] == ""
    assert "tools" not in record and "images" not in record
    assert record["chat_template_kwargs"] == {"enable_thinking": True}


def test_system_column_and_system_message_conflict() -> None:
    row = {"system": "a", "messages": [{"role": "system", "content": "b"}, {"role": "user", "content": "q"}]}
    with pytest.raises(DataError, match=r"^x:1: system: the row has both"):
        normalize_record(row, "x:1")


def test_unrecognized_row_lists_columns_and_formats() -> None:
    with pytest.raises(DataError, match=r"^x\.jsonl:2: unrecognized row format \(columns: text, label\)") as info:
        normalize_record({"text": "hello", "label": 1}, "x.jsonl:2")
    assert "Alpaca" in str(info.value) and "ShareGPT" in str(info.value)


def test_non_object_row() -> None:
    with pytest.raises(DataError, match=r"^x\.jsonl:5: expected a JSON object per row, got list"):
        normalize_record([1, 2], "x.jsonl:5")  # type: ignore[arg-type]
