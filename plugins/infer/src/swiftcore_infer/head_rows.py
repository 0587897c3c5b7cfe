"""``swiftcore infer --task``: input rows of a head model in, result rows out.

Rows by task (the same keys as the training data, so a training file can be scored as is):

- ``embedding``: ``{"text": ...}`` -> the row plus ``"embedding": [floats]``;
- ``classification``: ``{"text": ...}`` -> the row plus ``label``, ``label_id``, ``probabilities``
  (single-label), ``labels`` and ``probabilities`` (multi-label) or ``value`` (regression);
- ``reranker`` / ``generative_reranker``: ``{"query": ..., "documents": [...]}`` -> the row plus
  ``"results": [{"index", "score", "document"}]``, most relevant first.

A row that does not fit gets an ``"error"`` naming its line and field; the others are still answered.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

__all__ = ["head_result_rows", "row_problem"]

_RERANK_TASKS = ("reranker", "generative_reranker")


def row_problem(task: str, row: Any) -> str | None:
    """Why ``row`` cannot be answered by a ``task`` model (None when it can)."""
    if not isinstance(row, dict):
        return "expected a JSON object"
    if task in _RERANK_TASKS:
        if not isinstance(row.get("query"), str):
            return "field 'query' must be a string"
        docs = row.get("documents")
        if not isinstance(docs, list) or not docs or not all(isinstance(d, str) for d in docs):
            return "field 'documents' must be a non-empty list of strings"
        return None
    if not isinstance(row.get("text"), str):
        return "field 'text' must be a string"
    return None


def _answer(engine: Any, rows: Sequence[dict[str, Any]], dimensions: int | None) -> list[dict[str, Any]]:
    task = engine.head_task
    if task == "embedding":
        vectors = engine.embed([r["text"] for r in rows], dimensions=dimensions)
        return [{"embedding": v} for v in vectors]
    if task == "classification":
        return engine.classify([r["text"] for r in rows])
    out = []
    for row in rows:
        docs = row["documents"]
        ranked = engine.rerank(row["query"], docs)
        out.append({"results": [{"index": i, "score": s, "document": docs[i]} for i, s in ranked]})
    return out


def head_result_rows(
    engine: Any,
    rows: Sequence[tuple[str, dict[str, Any] | None, str | None]],
    *,
    dimensions: int | None = None,
    chunk: int = 64,
) -> Iterator[dict[str, Any]]:
    """Answer input rows in order, ``chunk`` at a time.

    Args:
        engine: a :class:`~swiftcore_infer.heads.HeadEngine`.
        rows: ``(where, row, error)``: where the row comes from (``file:line``), the row, or None and
            the reason it could not be read.
        dimensions: embeddings keep the first N components, renormalised (Matryoshka).
        chunk: rows sent to the model together (results are yielded chunk by chunk).

    Yields:
        One output row per input row: the input plus the result, or plus ``"error"``.
    """
    for start in range(0, len(rows), chunk):
        part = rows[start : start + chunk]
        problems = []
        for where, row, error in part:
            problem = error or row_problem(engine.head_task, row)
            problems.append(None if problem is None else (error or f"{where}: {problem}"))
        ready: list[dict[str, Any]] = [
            row for (_, row, _), problem in zip(part, problems, strict=True) if problem is None and row is not None
        ]
        answers = iter(_answer(engine, ready, dimensions) if ready else [])
        for (_, row, _), problem in zip(part, problems, strict=True):
            if problem is not None:
                yield {**(row if isinstance(row, dict) else {}), "error": problem}
            else:
                yield {**(row or {}), **next(answers)}
