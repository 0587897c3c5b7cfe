"""Benchmark files: both record shapes are read, and every bad line is an error naming the file and the line."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from swiftcore_eval.dataset import (
    BUILTIN_DATASETS,
    MAX_LISTED_PROBLEMS,
    DatasetError,
    builtin_dataset_path,
    read_dataset,
    resolve_dataset,
)

Writer = Callable[[str, list], Path]


def _row(question: str, answer: str, **extra: object) -> dict:
    return {"messages": [{"role": "user", "content": question}, {"role": "assistant", "content": answer}], **extra}


def test_the_training_format_asks_all_but_the_last_message_and_expects_that_one(write_jsonl: Writer) -> None:
    path = write_jsonl(
        "data.jsonl",
        [
            {
                "messages": [
                    {"role": "system", "content": "Answer in one word."},
                    {"role": "user", "content": "Is 4 even or odd?"},
                    {"role": "assistant", "content": "even"},
                    {"role": "user", "content": "And 5?"},
                    {"role": "assistant", "content": "odd"},
                ]
            },
            "",  # blank lines are skipped, and line numbers still count them
            _row("Is 7 even or odd?", "odd", id="x"),
        ],
    )
    first, second = read_dataset(path)
    assert [m["role"] for m in first.messages] == ["system", "user", "assistant", "user"]
    assert (first.question, first.answer, first.line) == ("And 5?", "odd", 1)
    assert (second.question, second.answer, second.line) == ("Is 7 even or odd?", "odd", 3)


def test_tools_are_offered_with_the_question_and_written_for_evalscope(write_jsonl: Writer, tmp_path: Path) -> None:
    """A training-format record's ``tools`` are kept (and written to the file EvalScope's adapter reads, which turns
    them into the request's tools); a record without tools has none."""
    from swiftcore_eval.dataset import write_benchmark_file

    add = {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}
    with_tools, plain = read_dataset(write_jsonl("data.jsonl", [_row("3 plus 4?", "7", tools=[add]), _row("q", "a")]))
    assert with_tools.tools == (add,) and plain.tools == ()
    rows = [
        json.loads(line)
        for line in write_benchmark_file([with_tools, plain], tmp_path / "b.jsonl").read_text().splitlines()
    ]
    assert rows[0]["tools"] == [add] and "tools" not in rows[1]


def test_the_question_answer_format_with_an_optional_system_prompt(write_jsonl: Writer) -> None:
    path = write_jsonl(
        "qa.jsonl", [{"question": "2+2?", "answer": "4"}, {"question": "Hi?", "answer": "hi", "system": "S"}]
    )
    plain, with_system = read_dataset(path)
    assert plain.messages == ({"role": "user", "content": "2+2?"},) and plain.answer == "4"
    assert with_system.messages == ({"role": "system", "content": "S"}, {"role": "user", "content": "Hi?"})


def test_limit_keeps_the_first_records_but_checks_the_whole_file(write_jsonl: Writer) -> None:
    path = write_jsonl("data.jsonl", [_row(f"q{i}", f"a{i}") for i in range(5)])
    assert [r.answer for r in read_dataset(path, limit=2)] == ["a0", "a1"]
    bad = write_jsonl("bad.jsonl", [_row("q", "a"), _row("q", "a"), "{oops"])
    with pytest.raises(DatasetError, match=re.escape(f"{bad}:3: not valid JSON")):
        read_dataset(bad, limit=1)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object, got list"),
        ('{"text": "hello"}', 'expected {"messages": [...]}'),
        ('{"messages": []}', "'messages' must be a non-empty list"),
        ('{"messages": ["hi"]}', "messages[0] is not an object"),
        (
            '{"messages": [{"role": "user", "content": "q"}]}',
            "the last message must be the assistant's reference answer",
        ),
        ('{"messages": [{"role": "assistant", "content": "a"}]}', "must follow a user message"),
        (
            '{"messages": [{"role": "tool", "content": "q"}, {"role": "assistant", "content": "a"}]}',
            "messages[0] has role 'tool'",
        ),
        (
            '{"messages": [{"role": "user", "content": [{"type": "text", "text": "q"}]}, '
            '{"role": "assistant", "content": "a"}]}',
            "messages[0] (user) has no text 'content'",
        ),
        (json.dumps(_row("q", "  ")), "the reference answer is empty"),
        ('{"question": "q"}', "'answer' must be a string"),
        ('{"question": "", "answer": "a"}', "'question' must be a non-empty string"),
        ('{"question": "q", "answer": "a", "system": 3}', "'system' must be a string"),
        (json.dumps(_row("q", "a", tools={"name": "add"})), "'tools' must be a list of OpenAI function tools"),
        (json.dumps(_row("q", "a", tools=[{"name": "add"}])), 'tools[0] is not {"type": "function"'),
        (
            json.dumps(_row("q", "a", tools=[{"type": "function", "function": {"name": "f", "parameters": []}}])),
            "tools[0] (f): 'parameters' must be a JSON Schema object",
        ),
    ],
)
def test_a_bad_line_is_an_error_naming_the_file_and_the_line(write_jsonl: Writer, line: str, message: str) -> None:
    path = write_jsonl("data.jsonl", [_row("fine", "ok"), line])
    with pytest.raises(DatasetError) as info:
        read_dataset(path)
    assert str(info.value).startswith(f"{path}:2: "), str(info.value)
    assert message in str(info.value)


def test_several_bad_lines_are_listed_together_up_to_a_few(write_jsonl: Writer) -> None:
    path = write_jsonl("data.jsonl", ["{bad"] * (MAX_LISTED_PROBLEMS + 2))
    with pytest.raises(DatasetError) as info:
        read_dataset(path)
    text = str(info.value)
    assert text.startswith(f"{path}: {MAX_LISTED_PROBLEMS + 2} bad lines:")
    assert f"{path}:1: not valid JSON" in text and f"{path}:{MAX_LISTED_PROBLEMS}: not valid JSON" in text
    assert f"{path}:{MAX_LISTED_PROBLEMS + 1}:" not in text and "and 2 more bad line(s)" in text


def test_an_empty_or_unreadable_file_is_an_error(write_jsonl: Writer, tmp_path: Path) -> None:
    empty = write_jsonl("empty.jsonl", ["", "  "])
    with pytest.raises(DatasetError, match=re.escape(f"{empty}: no records")):
        read_dataset(empty)
    binary = tmp_path / "data.bin"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(DatasetError, match=re.escape(f"{binary}: cannot read it")):
        read_dataset(binary)


def test_dataset_names_a_file_or_a_built_in_dataset(write_jsonl: Writer, tmp_path: Path, monkeypatch) -> None:
    assert resolve_dataset("parity") == builtin_dataset_path("parity")
    own = write_jsonl("parity", [_row("q", "a")])  # a file of that name in the working directory wins
    monkeypatch.chdir(tmp_path)
    assert resolve_dataset("parity") == Path("parity") and Path("parity").resolve() == own.resolve()
    with pytest.raises(DatasetError, match=r"--dataset nope: no such file, and no built-in dataset .*parity"):
        resolve_dataset("nope")
    with pytest.raises(DatasetError, match="a directory; give a JSONL file"):
        resolve_dataset(str(tmp_path))


def test_every_built_in_dataset_reads() -> None:
    for name in BUILTIN_DATASETS:
        assert read_dataset(builtin_dataset_path(name)), name


def test_the_parity_dataset_asks_the_demo_question_and_answers_it_right() -> None:
    records = read_dataset(builtin_dataset_path("parity"))
    assert len(records) == 40
    for record in records:
        number = int(re.fullmatch(r"Is (\d+) even or odd\?", record.question).group(1))
        assert record.answer == ("even" if number % 2 == 0 else "odd")
