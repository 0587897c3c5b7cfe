"""Read raw rows from a :class:`DatasetSource`, each tagged with where it came from.

jsonl and json files are read directly so that ``where`` holds exact line numbers; parquet, csv,
arrow, dataset directories and Hugging Face datasets go through ``datasets`` (imported on use) and are
named by row number.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from swiftcore_data.errors import DataError
from swiftcore_data.sources import TABLE_SUFFIXES, DatasetSource

__all__ = ["iter_rows"]

# A row, or the DataError that explains why the row could not be read (so --skip-bad-rows can count it).
RawRow = tuple[str, Any]


def iter_rows(source: DatasetSource, *, streaming: bool = False) -> Iterator[RawRow]:
    """Yield ``(where, row)`` for every row of ``source``; ``row`` is a :class:`DataError` for unreadable rows.

    Args:
        source: the dataset to read.
        streaming: read Hugging Face / parquet data lazily instead of materialising it.

    Raises:
        DataError: the file or dataset does not exist or cannot be opened.
    """
    if source.kind == "file":
        path = Path(source.path)
        if not path.exists():
            raise DataError(source.path, None, "file not found; check the --dataset path", reason="file not found")
        if path.is_dir():
            yield from _iter_hf(source, streaming=streaming)
        elif path.suffix.lower() == ".jsonl":
            yield from _iter_jsonl(path, source.label)
        elif path.suffix.lower() == ".json":
            yield from _iter_json(path, source.label)
        else:
            yield from _iter_table(path, source.label, TABLE_SUFFIXES[path.suffix.lower()], streaming=streaming)
    else:
        yield from _iter_hf(source, streaming=streaming)


def _not_utf8(where: str, exc: UnicodeDecodeError) -> DataError:
    return DataError(
        where,
        None,
        f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start}); re-save the file as UTF-8",
        reason="not UTF-8",
    )


def _too_deep(where: str) -> DataError:
    """A row nested past Python's recursion limit: ``json`` raises RecursionError, which no caller expects."""
    return DataError(
        where,
        None,
        f"invalid JSON: nested too deeply (more than about {sys.getrecursionlimit()} levels of arrays and objects)",
        reason="invalid JSON",
    )


def _iter_jsonl(path: Path, label: str) -> Iterator[RawRow]:
    # Lines are read as bytes and decoded one by one, so a non-UTF-8 byte is reported with its line.
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            where = f"{label}:{lineno}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield where, _not_utf8(where, exc)
                continue
            if not line.strip():
                continue
            try:
                yield where, json.loads(line)
            except json.JSONDecodeError as exc:
                yield (
                    where,
                    DataError(where, None, f"invalid JSON: {exc.msg} (column {exc.colno})", reason="invalid JSON"),
                )
            except RecursionError:
                yield where, _too_deep(where)


def _iter_json(path: Path, label: str) -> Iterator[RawRow]:
    """A JSON array of rows, each named by the line it starts on; a file starting with ``{`` is read as jsonl."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise _not_utf8(f"{label}:{line}", exc) from None
    start = len(text) - len(text.lstrip())
    if not text[start : start + 1] == "[":
        yield from _iter_jsonl(path, label)
        return
    decoder = json.JSONDecoder()
    pos, index = start + 1, 0
    while True:
        pos = _skip_ws(text, pos)
        if pos < len(text) and text[pos] == "]":
            return
        where = f"{label}:{text.count(chr(10), 0, pos) + 1}"
        try:
            row, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            # The array's structure is broken: nothing after this point can be located reliably.
            raise DataError(
                f"{label}:{exc.lineno}", None, f"invalid JSON: {exc.msg} (column {exc.colno})", reason="invalid JSON"
            ) from None
        except RecursionError:  # as a broken structure: the end of this row cannot be found
            raise _too_deep(where) from None
        yield where, row
        index += 1
        pos = _skip_ws(text, pos)
        if pos < len(text) and text[pos] == ",":
            pos += 1
        elif not (pos < len(text) and text[pos] == "]"):
            line = text.count(chr(10), 0, pos) + 1
            raise DataError(
                f"{label}:{line}", None, f"invalid JSON: expected ',' or ']' after row {index}", reason="invalid JSON"
            )


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _iter_table(path: Path, label: str, builder: str, *, streaming: bool) -> Iterator[RawRow]:
    import datasets

    try:
        dataset = datasets.load_dataset(builder, data_files=str(path), split="train", streaming=streaming)
    except Exception as exc:  # datasets raises many types (ArrowInvalid, ValueError, ...) for unreadable files
        raise DataError(label, None, f"cannot read {builder} file: {exc}", reason="unreadable file") from exc
    for i, row in enumerate(dataset):
        yield f"{label}:row {i + 1}", row


def _iter_hf(source: DatasetSource, *, streaming: bool) -> Iterator[RawRow]:
    import datasets

    path = Path(source.path)
    try:
        if path.is_dir() and ((path / "dataset_dict.json").exists() or (path / "state.json").exists()):
            # A directory written by Dataset(Dict).save_to_disk.
            dataset = datasets.load_from_disk(str(path))
            if isinstance(dataset, datasets.DatasetDict):
                dataset = dataset[source.split]
            if streaming:
                dataset = dataset.to_iterable_dataset()
        else:
            dataset = datasets.load_dataset(source.path, source.subset, split=source.split, streaming=streaming)
    except Exception as exc:  # not found, unknown split, no network, ...: all mean "cannot load this source"
        raise DataError(
            source.label,
            None,
            f"cannot load dataset: {type(exc).__name__}: {exc}",
            reason="unreadable dataset",
        ) from exc
    for i, row in enumerate(dataset):
        yield f"{source.label}:row {i + 1}", row
