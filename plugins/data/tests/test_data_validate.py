"""Validation errors name file:line and the field, and --skip-bad-rows counts them."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from swiftcore_data import DataError, count_media_placeholders, load_records, normalize_record


def chat(question: str = "q", answer: str = "a", **extra: Any) -> dict[str, Any]:
    """A minimal valid messages row."""
    return {"messages": [{"role": "user", "content": question}, {"role": "assistant", "content": answer}], **extra}


USER = {"role": "user", "content": "q"}
ANSWER = {"role": "assistant", "content": "a"}
CALL = {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{}"}}]}

# (row, field named in the message, reason counted by --skip-bad-rows, a phrase of the problem)
BAD_ROWS: dict[str, tuple[dict[str, Any], str, str, str]] = {
    "unknown role": (
        {"messages": [USER, {"role": "bot", "content": "a"}]},
        "messages[1].role",
        "unknown role",
        "unknown role 'bot'; expected one of system, user, assistant, tool",
    ),
    "no assistant": ({"messages": [USER]}, "messages", "no assistant turn", "no assistant turn"),
    "tool without call": (
        {"messages": [USER, {"role": "tool", "content": "r"}, ANSWER]},
        "messages[1]",
        "tool message without a preceding call",
        "tool message without a preceding assistant tool call",
    ),
    "tool after user": (
        {"messages": [USER, CALL, {"role": "tool", "content": "r"}, USER, {"role": "tool", "content": "r"}, ANSWER]},
        "messages[4]",
        "tool message without a preceding call",
        "without a preceding assistant tool call",
    ),
    "tool wrong id": (
        {"messages": [USER, CALL, {"role": "tool", "content": "r", "tool_call_id": "c9"}, ANSWER]},
        "messages[2].tool_call_id",
        "tool message without a preceding call",
        "'c9' matches no call",
    ),
    "too many images": (
        chat("<image>what?", images=["a.png", "b.png"]),
        "images",
        "media count mismatch",
        "2 images given but 1 placeholder(s)",
    ),
    "tag without column": (chat("<audio>transcribe"), "audios", "media count mismatch", "no 'audios' column"),
    "part count": (
        {
            "messages": [{"role": "user", "content": [{"type": "video"}, {"type": "video"}]}, ANSWER],
            "videos": ["v.mp4"],
        },
        "videos",
        "media count mismatch",
        "1 videos given but 2 placeholder(s)",
    ),
    "part without value": (
        {"messages": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "q"}]}, ANSWER]},
        "messages[0].content[0]",
        "media count mismatch",
        "image part has no 'image' value",
    ),
    "system not first": (
        {"messages": [USER, {"role": "system", "content": "s"}, ANSWER]},
        "messages[1].role",
        "misplaced system message",
        "must be the first message",
    ),
    "bad part type": (
        {"messages": [{"role": "user", "content": [{"type": "pdf"}]}, ANSWER]},
        "messages[0].content[0].type",
        "invalid content part",
        "unknown content part type 'pdf'",
    ),
    "call without name": (
        {"messages": [USER, {"role": "assistant", "content": "", "tool_calls": [{"function": {}}]}]},
        "messages[1].tool_calls[0]",
        "invalid tool call",
        "function.name",
    ),
    "content missing": ({"messages": [USER, {"role": "assistant"}]}, "messages[1].content", "invalid field", "missing"),
    "bad content type": (
        {"messages": [USER, {"role": "assistant", "content": 3}]},
        "messages[1].content",
        "invalid field",
        "expected a string or a list of content parts",
    ),
    "tools not a list": (chat(tools={"name": "f"}), "tools", "invalid field", "expected a list"),
}


@pytest.mark.parametrize("case", list(BAD_ROWS))
def test_bad_row_error_names_file_line_and_field(case: str, write_jsonl: Callable[..., Path]) -> None:
    row, field, reason, phrase = BAD_ROWS[case]
    path = write_jsonl([chat(), chat(), row, chat()])
    with pytest.raises(DataError) as info:
        load_records([str(path)])
    error = info.value
    assert str(error).startswith(f"{path}:3: {field}: ")
    assert phrase in str(error)
    assert (error.where, error.field, error.reason) == (f"{path}:3", field, reason)
    assert "--skip-bad-rows" in str(error)  # the error says how to get past it


def test_invalid_json_line_is_reported_and_skippable(write_jsonl: Callable[..., Path]) -> None:
    path = write_jsonl([chat(), '{"messages": [', chat()])
    with pytest.raises(DataError, match=rf"^{path}:2: invalid JSON: "):
        load_records([str(path)])
    records = load_records([str(path)], skip_bad_rows=True, shuffle=False)
    assert [r["_source"] for r in records] == [f"{path}:1", f"{path}:3"]
    assert records.skipped.counts == {"invalid JSON": 1}


DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize(
    "row",
    [
        '{"messages": [], "x": ' + DEEP + "}",
        json.dumps(chat(tools=DEEP)),  # a JSON string inside the row
        json.dumps({"conversations": [{"from": "function_call", "value": DEEP}]}),
    ],
    ids=["line", "tools-string", "sharegpt-function_call"],
)
def test_json_nested_past_the_recursion_limit_is_a_bad_row(row: str, write_jsonl: Callable[..., Path]) -> None:
    """Not a RecursionError traceback: an error naming file and line, and --skip-bad-rows skips it."""
    path = write_jsonl([chat(), row, chat()])
    with pytest.raises(DataError, match=rf"^{path}:2: .*(invalid JSON: nested too deeply|\(nested too deeply\))"):
        load_records([str(path)])
    records = load_records([str(path)], skip_bad_rows=True, shuffle=False)
    assert [r["_source"] for r in records] == [f"{path}:1", f"{path}:3"]


def test_a_json_array_nested_past_the_recursion_limit_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "train.json"
    path.write_text("[\n" + json.dumps(chat()) + ",\n" + DEEP + "\n]\n")
    with pytest.raises(DataError, match=rf"^{path}:3: invalid JSON: nested too deeply"):
        load_records([str(path)], skip_bad_rows=True)


def test_skip_bad_rows_counts_per_reason_and_logs(
    write_jsonl: Callable[..., Path], caplog: pytest.LogCaptureFixture
) -> None:
    bad = ["unknown role", "unknown role", "no assistant", "tool without call", "too many images", "unknown role"]
    rows = [chat("q0")] + [BAD_ROWS[name][0] for name in bad] + [chat("q1"), "not json"]
    path = write_jsonl(rows)
    with caplog.at_level(logging.WARNING, logger="swiftcore_data"):
        records = load_records([str(path)], skip_bad_rows=True, shuffle=False)
    assert [r["messages"][0]["content"] for r in records] == ["q0", "q1"]
    report = records.skipped
    assert report.total == 9 and report.skipped == 7
    assert dict(report.counts) == {
        "unknown role": 3,
        "no assistant turn": 1,
        "tool message without a preceding call": 1,
        "media count mismatch": 1,
        "invalid JSON": 1,
    }
    assert report.examples["unknown role"][0].startswith(f"{path}:2: messages[1].role")
    assert "skipped 7 of 9 rows" in caplog.text and "unknown role" in caplog.text


def test_all_rows_bad_is_an_error_even_when_skipping(write_jsonl: Callable[..., Path]) -> None:
    path = write_jsonl([BAD_ROWS["unknown role"][0], BAD_ROWS["no assistant"][0]])
    with pytest.raises(DataError, match="every row was invalid"):
        load_records([str(path)], skip_bad_rows=True)


def test_valid_tool_conversations_pass() -> None:
    row = {
        "messages": [
            USER,
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": "c1", "function": {"name": "f", "arguments": {"x": 1}}},
                    {"id": "c2", "function": {"name": "g", "arguments": "{}"}},
                ],
            },
            {"role": "tool", "content": "r1", "tool_call_id": "c1"},
            {"role": "tool", "content": "r2", "tool_call_id": "c2"},
        ]
    }
    # An open tool round (no final answer) is a valid training row: the assistant turn made the calls.
    assert normalize_record(row)["messages"][3]["tool_call_id"] == "c2"


def test_media_parts_and_tags_count_together() -> None:
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "image", "image": "a.png"},
                {"type": "text", "text": "and <image> plus <video>"},
                {"type": "input_audio", "input_audio": {"data": "..."}},
            ],
        },
        {"role": "assistant", "content": "<image> in an answer counts too"},
    ]
    assert count_media_placeholders(messages) == {"images": 3, "audios": 1, "videos": 1}
    record = {"messages": messages, "images": ["a", "b", "c"], "audios": ["x"], "videos": ["v"]}
    assert normalize_record(record)["images"] == ["a", "b", "c"]
