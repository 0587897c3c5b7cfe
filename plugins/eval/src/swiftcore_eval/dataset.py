"""Benchmark files: local JSONL, checked line by line before anything is asked.

Two record shapes are read (one JSON object per line; blank lines are skipped):

- the training format, ``{"messages": [..., {"role": "assistant", "content": ANSWER}]}``: the conversation up to
  the last message is the prompt, the last message (the assistant's) is the reference answer, as
  ``swiftcore infer`` reads a training file; an optional ``"tools"`` (OpenAI function tools) is offered with the
  question (the model may answer in text or call a tool; a call is no text, so it scores as a miss);
- ``{"question": Q, "answer": A}`` (optionally ``"system": S``), as EvalScope's own QA files are written.

Nothing here imports EvalScope, torch or transformers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from swiftcore.api import SwiftcoreError

__all__ = [
    "BUILTIN_DATASETS",
    "DatasetError",
    "EvalRecord",
    "builtin_dataset_path",
    "read_dataset",
    "resolve_dataset",
    "write_benchmark_file",
]

#: Datasets shipped in this package (``--dataset NAME``) -> (file under ``swiftcore_eval/data``, description).
BUILTIN_DATASETS: dict[str, tuple[str, str]] = {
    "parity": (
        "parity.jsonl",
        "the 40 held-out questions of `make demo` ('Is N even or odd?', answered 'even' or 'odd')",
    ),
}

_ROLES = ("system", "user", "assistant")
#: The most problems one error message lists (a wholly wrong file would otherwise print every line).
MAX_LISTED_PROBLEMS = 5


class DatasetError(SwiftcoreError):
    """A benchmark file that cannot be read; the message names the file and each bad line."""


@dataclass(frozen=True)
class EvalRecord:
    """One question: the prompt messages, the reference answer, and where it was read.

    Attributes:
        messages: the conversation asked (``{"role", "content"}`` dicts, the last one the user's).
        answer: the reference answer a reply must match.
        line: the 1-based line of the file it came from.
        tools: the OpenAI function tools offered with the question (empty: none).
    """

    messages: tuple[dict[str, str], ...]
    answer: str
    line: int
    tools: tuple[dict[str, Any], ...] = ()

    @property
    def question(self) -> str:
        """The last user message: what the record asks."""
        return self.messages[-1]["content"]


def builtin_dataset_path(name: str) -> Path:
    """The file of the built-in dataset ``name`` (see :data:`BUILTIN_DATASETS`)."""
    file, _ = BUILTIN_DATASETS[name]
    return Path(str(resources.files("swiftcore_eval") / "data" / file))


def resolve_dataset(value: str) -> Path:
    """``--dataset``'s value as a file: an existing path, else a built-in dataset's name.

    Raises:
        DatasetError: neither a file nor a built-in name.
    """
    path = Path(value)
    if path.is_file():
        return path
    if path.exists():
        raise DatasetError(f"--dataset {value}: a directory; give a JSONL file")
    if value in BUILTIN_DATASETS:
        return builtin_dataset_path(value)
    names = ", ".join(sorted(BUILTIN_DATASETS))
    raise DatasetError(f"--dataset {value}: no such file, and no built-in dataset of that name (built-in: {names})")


def _messages(value: Any) -> tuple[tuple[dict[str, str], ...], str]:
    if not isinstance(value, list) or not value:
        raise ValueError('\'messages\' must be a non-empty list of {"role", "content"} objects')
    out: list[dict[str, str]] = []
    for i, message in enumerate(value):
        if not isinstance(message, dict):
            raise ValueError(f"messages[{i}] is not an object")
        role, content = message.get("role"), message.get("content")
        if role not in _ROLES:
            raise ValueError(f"messages[{i}] has role {role!r}; expected one of {', '.join(_ROLES)}")
        if not isinstance(content, str):
            raise ValueError(f"messages[{i}] ({role}) has no text 'content' (text-only benchmarks: a string)")
        out.append({"role": role, "content": content})
    if out[-1]["role"] != "assistant":
        raise ValueError(f"the last message must be the assistant's reference answer; it is the {out[-1]['role']}'s")
    prompt, answer = tuple(out[:-1]), out[-1]["content"]
    if not prompt or prompt[-1]["role"] != "user":
        raise ValueError("the reference answer must follow a user message (the question)")
    return prompt, answer


def _tools(value: Any) -> tuple[dict[str, Any], ...]:
    """A record's ``tools``: OpenAI function tools, ``{"type": "function", "function": {"name", ...}}``."""
    if not isinstance(value, list):
        raise ValueError("'tools' must be a list of OpenAI function tools")
    for i, tool in enumerate(value):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
            raise ValueError(f'tools[{i}] is not {{"type": "function", "function": {{"name": ..., ...}}}}')
        parameters = function.get("parameters", {})
        if not isinstance(parameters, dict) or parameters.get("type", "object") != "object":
            raise ValueError(f"tools[{i}] ({function['name']}): 'parameters' must be a JSON Schema object")
    return tuple(value)


def _question(record: dict[str, Any]) -> tuple[tuple[dict[str, str], ...], str]:
    question, answer, system = record.get("question"), record.get("answer"), record.get("system")
    if not isinstance(question, str) or not question:
        raise ValueError("'question' must be a non-empty string")
    if not isinstance(answer, str):
        raise ValueError("'answer' must be a string (the reference answer)")
    if system is not None and not isinstance(system, str):
        raise ValueError("'system' must be a string")
    prompt = ({"role": "system", "content": system},) if system else ()
    return (*prompt, {"role": "user", "content": question}), answer


def _record(value: Any, line: int) -> EvalRecord:
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, got {type(value).__name__}")
    if "messages" in value:
        prompt, answer = _messages(value["messages"])
    elif "question" in value:
        prompt, answer = _question(value)
    else:
        raise ValueError('expected {"messages": [...]} (the last message the answer) or {"question", "answer"}')
    if not answer.strip():
        raise ValueError("the reference answer is empty")
    tools = _tools(value["tools"]) if value.get("tools") is not None else ()
    return EvalRecord(messages=prompt, answer=answer, line=line, tools=tools)


def read_dataset(path: str | Path, limit: int | None = None) -> list[EvalRecord]:
    """Read and check every record of the JSONL file ``path`` (all of it, even with ``limit``).

    Args:
        path: the file.
        limit: keep only the first ``limit`` records (None: all).

    Returns:
        The records, in file order.

    Raises:
        DatasetError: the file cannot be read, holds no record, or has bad lines (each named ``FILE:LINE``).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: cannot read it ({exc})") from exc
    records: list[EvalRecord] = []
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as exc:
            problems.append(f"{path}:{number}: not valid JSON ({exc})")
            continue
        try:
            records.append(_record(value, number))
        except ValueError as exc:
            problems.append(f"{path}:{number}: {exc}")
    if problems:
        shown = problems[:MAX_LISTED_PROBLEMS]
        more = len(problems) - len(shown)
        tail = f"\n  ... and {more} more bad line(s)" if more else ""
        if len(problems) == 1:
            raise DatasetError(problems[0])
        raise DatasetError(f"{path}: {len(problems)} bad lines:\n  " + "\n  ".join(shown) + tail)
    if not records:
        raise DatasetError(f"{path}: no records (one JSON object per line)")
    return records[:limit] if limit is not None else records


def write_benchmark_file(records: list[EvalRecord], path: str | Path) -> Path:
    """Write ``records`` as the JSONL the EvalScope adapter reads (``{"messages", "answer", "line"}``, and
    ``"tools"`` for a record that offers tools)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for r in records:
        row: dict[str, Any] = {"messages": list(r.messages), "answer": r.answer, "line": r.line}
        if r.tools:
            row["tools"] = list(r.tools)
        rows.append(row)
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return path
