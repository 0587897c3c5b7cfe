"""Errors of swiftcore-heads (all are :class:`swiftcore.errors.SwiftcoreError`)."""

from __future__ import annotations

from swiftcore.api import SwiftcoreError

__all__ = ["HeadDataError", "HeadConfigError", "HeadCheckpointError", "HeadInputError"]


class HeadDataError(SwiftcoreError):
    """A dataset row does not fit the task (names the file, line and field)."""

    def __init__(self, where: str, field: str | None, problem: str) -> None:
        self.where, self.field, self.problem = where, field, problem
        at = f"{where}: field {field!r}" if field else where
        super().__init__(f"{at}: {problem}")


class HeadConfigError(SwiftcoreError):
    """The head's options do not fit the model (e.g. an --mrl-dims value above the hidden size)."""


class HeadCheckpointError(SwiftcoreError):
    """A directory is not a head checkpoint swiftcore can load."""


class HeadInputError(SwiftcoreError, ValueError):
    """An inference input does not fit the head (wrong task, ``dimensions`` out of range)."""
