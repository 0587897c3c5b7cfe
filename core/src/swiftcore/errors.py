"""The swiftcore error tree.

Every error names its subject (plugin, distribution and version, spec, field), says what is wrong, and ends with what to
do. The CLI turns a :class:`SwiftcoreError` into a message and exit code 2 instead of a traceback.
"""

from __future__ import annotations

__all__ = [
    "ConflictError",
    "IncompatiblePluginError",
    "PluginError",
    "PluginLoadError",
    "PluginNotFoundError",
    "SpecError",
    "SwiftcoreError",
    "UnknownNameError",
    "OutputExistsError",
]


class SwiftcoreError(Exception):
    """Base class of every error swiftcore raises on purpose (bad input, bad plugin, bad spec)."""

    exit_code = 2


class SpecError(SwiftcoreError, ValueError):
    """A spec dataclass got an invalid field value.

    Attributes:
        field: the offending field's name.
    """

    def __init__(self, spec_kind: str, name: str, field: str, problem: str) -> None:
        self.spec_kind = spec_kind
        self.name = name
        self.field = field
        self.problem = problem
        super().__init__(f"{spec_kind} {name!r}: field {field!r}: {problem}")


class PluginError(SwiftcoreError):
    """Something is wrong with a plugin (it is named in the message)."""


class PluginLoadError(PluginError):
    """A plugin could not be imported or registered; the original error is the ``__cause__``."""


class PluginNotFoundError(PluginError):
    """``--plugin SPEC`` matched no entry point, distribution, module or file."""


class IncompatiblePluginError(PluginError):
    """A plugin targets a plugin API this swiftcore does not provide."""


class ConflictError(SwiftcoreError):
    """Two plugins provide the same name and the user did not say which one to use."""


class UnknownNameError(SwiftcoreError, KeyError):
    """A model, template, head, bridge or backend name that no loaded plugin provides."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class OutputExistsError(SwiftcoreError, FileExistsError):
    """An output directory already holds something; swiftcore never writes over it."""
