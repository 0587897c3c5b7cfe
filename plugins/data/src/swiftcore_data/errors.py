"""The data pipeline's error and the report of rows skipped with ``--skip-bad-rows``."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

from swiftcore.api import SwiftcoreError

__all__ = ["DataError", "SkipReport"]

logger = logging.getLogger("swiftcore_data")


class DataError(SwiftcoreError, ValueError):
    """A dataset row, file or argument is invalid.

    The message reads ``"<where>: <field>: <problem>"``, e.g.
    ``"train.jsonl:17: messages[2].role: unknown role 'bot'; expected one of system, user, assistant, tool"``.

    Attributes:
        where: the file and line (``"train.jsonl:17"``), parquet row (``"train.parquet:row 3"``) or argument.
        field: the offending field as a path into the row (``"messages[2].role"``), or None for the whole row.
        problem: what is wrong and, where it helps, what to do.
        reason: a short, stable category (``"unknown role"``) that ``--skip-bad-rows`` counts by.
        hint: an optional extra line on how to get past the error.
    """

    def __init__(
        self,
        where: str,
        field: str | None,
        problem: str,
        *,
        reason: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.where = where
        self.field = field
        self.problem = problem
        self.reason = reason or problem
        self.hint = hint
        super().__init__(where, field, problem)

    def __str__(self) -> str:
        head = f"{self.where}: {self.field}: {self.problem}" if self.field else f"{self.where}: {self.problem}"
        return f"{head}\n  hint: {self.hint}" if self.hint else head


@dataclass
class SkipReport:
    """What ``--skip-bad-rows`` dropped: counts per reason and the first few places of each.

    Attributes:
        total: rows read (good and bad).
        counts: skipped rows per :attr:`DataError.reason`.
        examples: for each reason, the first few errors (full messages) so the user can look them up.
    """

    total: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    max_examples: int = 3

    @property
    def skipped(self) -> int:
        """How many rows were skipped in all."""
        return sum(self.counts.values())

    def add(self, error: DataError) -> None:
        """Count one skipped row."""
        self.counts[error.reason] += 1
        seen = self.examples.setdefault(error.reason, [])
        if len(seen) < self.max_examples:
            seen.append(str(error))

    def summary(self) -> str:
        """A human-readable report, one line per reason with its count and first example."""
        if not self.counts:
            return f"no bad rows among {self.total} rows"
        lines = [f"skipped {self.skipped} of {self.total} rows:"]
        for reason, count in self.counts.most_common():
            lines.append(f"  {count:6d}  {reason}  (e.g. {self.examples[reason][0]})")
        return "\n".join(lines)

    def log(self) -> None:
        """Log :meth:`summary` as a warning when anything was skipped (the CLI shows warnings)."""
        if self.counts:
            logger.warning("%s", self.summary())
