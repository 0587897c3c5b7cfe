"""Sources, file formats, mixing ratios, shuffling, streaming and the validation split."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from swiftcore_data import (
    DataError,
    DatasetSource,
    Records,
    RecordStream,
    load_records,
    parse_dataset_arg,
    split_train_val,
)


def chat(question: str = "q", answer: str = "a", **extra: Any) -> dict[str, Any]:
    """A minimal valid messages row."""
    return {"messages": [{"role": "user", "content": question}, {"role": "assistant", "content": answer}], **extra}


def questions(records: Any) -> list[str]:
    return [r["messages"][0]["content"] for r in records]


# ------------------------------------------------------------------------------------------- sources


@pytest.mark.parametrize(
    ("arg", "expected"),
    [
        ("data/train.jsonl", DatasetSource("file", "data/train.jsonl")),
        ("data/train.jsonl#0.5", DatasetSource("file", "data/train.jsonl", ratio=0.5)),
        ("x.parquet#3", DatasetSource("file", "x.parquet", ratio=3.0)),
        ("hf:org/name", DatasetSource("hf", "org/name", split="train")),
        ("hf:org/name:validation#2.5", DatasetSource("hf", "org/name", split="validation", ratio=2.5)),
        ("hf:./saved:test[:10]", DatasetSource("hf", "./saved", split="test[:10]")),
    ],
)
def test_parse_dataset_arg(arg: str, expected: DatasetSource) -> None:
    assert parse_dataset_arg(arg) == expected


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("train.jsonl#half", "'half' after '#' is not a number"),
        ("train.jsonl#0", "sampling ratio must be a positive number"),
        ("train.jsonl#-1", "sampling ratio must be a positive number"),
        ("train.txt", "unsupported file type '.txt'"),
        ("hf:", "no dataset name after 'hf:'"),
        ("", "empty dataset argument"),
    ],
)
def test_parse_dataset_arg_errors(arg: str, message: str) -> None:
    with pytest.raises(DataError, match=message):
        parse_dataset_arg(arg)


def test_source_str_round_trips() -> None:
    for arg in ("data/a.jsonl", "data/a.jsonl#0.5", "hf:org/n:validation#2"):
        assert str(parse_dataset_arg(arg)) == arg


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"nope\.jsonl: file not found"):
        load_records([str(tmp_path / "nope.jsonl")])


# ------------------------------------------------------------------------------------------ files


def test_jsonl_sources_carry_exact_line_numbers(write_jsonl: Callable[..., Path]) -> None:
    path = write_jsonl([chat("a"), "", "   ", chat("b")])
    records = load_records(str(path), shuffle=False)
    assert isinstance(records, Records)
    assert [r["_source"] for r in records] == [f"{path}:1", f"{path}:4"]


def test_json_array_rows_are_named_by_their_first_line(tmp_path: Path) -> None:
    path = tmp_path / "train.json"
    rows = [chat("a"), chat("b"), {"messages": [{"role": "bot", "content": "x"}]}]
    path.write_text(json.dumps(rows, indent=2), encoding="utf-8")
    text_lines = path.read_text().splitlines()
    with pytest.raises(DataError) as info:
        load_records([str(path)])
    line = int(info.value.where.rsplit(":", 1)[1])
    assert text_lines[line - 1].strip() == "{" and '"bot"' in "\n".join(text_lines[line : line + 4])
    good = load_records([f"{path}"], skip_bad_rows=True, shuffle=False)
    assert [int(r["_source"].rsplit(":", 1)[1]) for r in good] == [
        2,
        2 + len(json.dumps(chat("a"), indent=2).splitlines()),
    ]


def test_parquet_file(tmp_path: Path) -> None:
    import datasets

    rows = [chat(f"q{i}", images=None) for i in range(4)]  # parquet has the column in every row, None = absent
    rows[2] = chat("<image>q2", images=["a.png"])
    path = tmp_path / "train.parquet"
    datasets.Dataset.from_list(rows).to_parquet(str(path))
    records = load_records([str(path)], shuffle=False)
    assert questions(records) == ["q0", "q1", "<image>q2", "q3"]
    assert records[2]["images"] == ["a.png"] and "images" not in records[0]
    assert [r["_source"] for r in records] == [f"{path}:row {i}" for i in range(1, 5)]


def test_parquet_bad_row_names_the_row(tmp_path: Path) -> None:
    import datasets

    rows = [chat("q0"), {"messages": [{"role": "user", "content": "q1"}, {"role": "bot", "content": "x"}]}]
    path = tmp_path / "train.parquet"
    datasets.Dataset.from_list(rows).to_parquet(str(path))
    with pytest.raises(DataError, match=rf"^{path}:row 2: messages\[1\]\.role: unknown role 'bot'"):
        load_records([str(path)])


def test_local_hf_dataset_saved_to_disk(tmp_path: Path) -> None:
    import datasets

    alpaca = [{"instruction": f"i{n}", "input": "", "output": f"o{n}"} for n in range(3)]
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(alpaca), "test": datasets.Dataset.from_list(alpaca[:1])}
    ).save_to_disk(str(tmp_path / "saved"))
    records = load_records([f"hf:{tmp_path / 'saved'}:train"], shuffle=False)
    assert questions(records) == ["i0", "i1", "i2"]
    assert records[0]["_source"] == f"hf:{tmp_path / 'saved'}[train]:row 1"
    assert questions(load_records([f"hf:{tmp_path / 'saved'}:test"])) == ["i0"]
    streamed = load_records([f"hf:{tmp_path / 'saved'}:train"], streaming=True, shuffle=False)
    assert questions(streamed) == ["i0", "i1", "i2"]
    with pytest.raises(DataError, match="cannot load dataset"):
        load_records([f"hf:{tmp_path / 'saved'}:nosuchsplit"])


def test_local_dataset_directory_of_data_files(tmp_path: Path) -> None:
    folder = tmp_path / "my_dataset"
    folder.mkdir()
    rows = [{"query": f"q{i}", "response": f"r{i}"} for i in range(5)]
    (folder / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    for arg in (f"hf:{folder}", str(folder)):
        records = load_records([arg], shuffle=False)
        assert questions(records) == [f"q{i}" for i in range(5)]
        assert questions(load_records([arg], streaming=True, shuffle=False)) == [f"q{i}" for i in range(5)]


# ------------------------------------------------------------------------------- mixing, shuffling


def test_ratios_give_expected_counts_deterministically(write_jsonl: Callable[..., Path]) -> None:
    a = write_jsonl([chat(f"a{i}") for i in range(10)], "a.jsonl")
    b = write_jsonl([chat(f"b{i}") for i in range(8)], "b.jsonl")
    c = write_jsonl([chat(f"c{i}") for i in range(4)], "c.jsonl")
    args = [f"{a}#0.5", f"{b}#2.5", str(c)]
    records = load_records(args, seed=7)
    counts = Counter(q[0] for q in questions(records))
    assert counts == {"a": 5, "b": 20, "c": 4}
    per_row = Counter(questions(records))
    assert len([q for q in per_row if q.startswith("a")]) == 5  # a half, without replacement
    assert sorted(n for q, n in per_row.items() if q.startswith("b")) == [2] * 4 + [3] * 4  # 2 passes + half
    # Same seed, same records in the same order; another seed, another sample and order.
    assert questions(load_records(args, seed=7)) == questions(records)
    other = load_records(args, seed=8)
    assert Counter(q[0] for q in questions(other)) == counts
    assert questions(other) != questions(records)


def test_shuffle_mixes_sources_and_no_shuffle_keeps_order(write_jsonl: Callable[..., Path]) -> None:
    a = write_jsonl([chat(f"a{i}") for i in range(20)], "a.jsonl")
    b = write_jsonl([chat(f"b{i}") for i in range(20)], "b.jsonl")
    ordered = questions(load_records([str(a), str(b)], shuffle=False))
    assert ordered == [f"a{i}" for i in range(20)] + [f"b{i}" for i in range(20)]
    shuffled = questions(load_records([str(a), str(b)], seed=1))
    assert sorted(shuffled) == sorted(ordered) and shuffled != ordered
    assert {q[0] for q in shuffled[:20]} == {"a", "b"}


def test_repeated_rows_are_independent_copies(write_jsonl: Callable[..., Path]) -> None:
    path = write_jsonl([chat("x")])
    first, second = load_records([f"{path}#2"])
    first["id"] = "changed"
    assert "id" not in second


# ----------------------------------------------------------------------------------------- streaming


def test_streaming_yields_records_lazily(write_jsonl: Callable[..., Path]) -> None:
    path = write_jsonl([chat(f"q{i}") for i in range(6)] + [{"messages": [{"role": "bot", "content": "x"}]}])
    stream = load_records([str(path)], streaming=True, shuffle=False, skip_bad_rows=True)
    assert isinstance(stream, RecordStream)
    iterator = iter(stream)
    first = next(iterator)
    assert first["messages"][0]["content"] == "q0" and first["_source"] == f"{path}:1"
    assert questions(iterator) == [f"q{i}" for i in range(1, 6)]
    assert stream.skipped.counts == {"unknown role": 1}
    assert questions(stream) == [f"q{i}" for i in range(6)]  # re-iterable


def test_streaming_bad_row_raises_when_reached(write_jsonl: Callable[..., Path]) -> None:
    path = write_jsonl([chat("q0"), {"messages": [{"role": "user", "content": "q"}]}])
    iterator = iter(load_records([str(path)], streaming=True))
    with pytest.raises(DataError, match=rf"{path}:2: messages: no assistant turn"):
        list(iterator)


def test_streaming_parquet_mix_and_shuffle(tmp_path: Path, write_jsonl: Callable[..., Path]) -> None:
    import datasets

    parquet = tmp_path / "p.parquet"
    datasets.Dataset.from_list([chat(f"p{i}") for i in range(30)]).to_parquet(str(parquet))
    jsonl = write_jsonl([chat(f"j{i}") for i in range(30)], "j.jsonl")
    args = [str(parquet), f"{jsonl}#2"]
    stream = load_records(args, streaming=True, seed=3, shuffle_buffer=8)
    got = questions(stream)
    assert Counter(q[0] for q in got) == {"p": 30, "j": 60}  # integer ratios are exact when streaming
    assert got == questions(load_records(args, streaming=True, seed=3, shuffle_buffer=8))
    assert got != sorted(got)


def test_streaming_fractional_ratio_subsamples(write_jsonl: Callable[..., Path]) -> None:
    path = write_jsonl([chat(f"q{i}") for i in range(400)])
    kept = questions(load_records([f"{path}#0.25"], streaming=True, seed=0))
    assert 60 < len(kept) < 140 and len(set(kept)) == len(kept)  # 100 expected, Bernoulli per row


# --------------------------------------------------------------------------------------------- split


def test_split_train_val_is_deterministic_and_disjoint() -> None:
    records = [{"id": i} for i in range(50)]
    train, val = split_train_val(records, val_ratio=0.1, seed=0)
    assert len(val) == 5 and len(train) == 45
    assert sorted(r["id"] for r in train + val) == list(range(50))
    assert [r["id"] for r in train] == sorted(r["id"] for r in train)  # input order kept
    assert split_train_val(records, val_ratio=0.1, seed=0) == (train, val)
    assert split_train_val(records, val_ratio=0.1, seed=1)[1] != val


def test_split_edge_cases() -> None:
    assert split_train_val([1, 2, 3], val_ratio=0) == ([1, 2, 3], [])
    assert len(split_train_val([1, 2, 3], val_ratio=0.01)[1]) == 1  # at least one validation row
    with pytest.raises(DataError, match="must be in"):
        split_train_val([1, 2], val_ratio=1.5)
    with pytest.raises(DataError, match="leaves no training rows"):
        split_train_val([1], val_ratio=0.5)


def test_import_is_light() -> None:
    code = (
        "import sys, swiftcore_data; "
        "print(sorted(m for m in ('torch', 'transformers', 'datasets') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
