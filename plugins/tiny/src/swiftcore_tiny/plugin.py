"""Hook implementations of swiftcore-tiny: the ``make-tiny`` and ``demo`` commands, as plain data."""

from __future__ import annotations

from swiftcore.api import CommandSpec, hookimpl

SWIFTCORE_API = "1.5"  # written against plugin API 1.5: the package face uses swiftcore.api.lazy_exports


@hookimpl
def swiftcore_register_commands() -> list[CommandSpec]:
    """``swiftcore make-tiny``: a tiny random checkpoint of any installed model family."""
    return [
        CommandSpec(
            name="make-tiny",
            target="swiftcore_tiny.command:make_tiny",
            short_help="Write a tiny random checkpoint of a model family.",
        ),
        CommandSpec(
            name="demo",
            target="swiftcore_tiny.command:demo",
            short_help="make demo: a tiny model learns a task, before/after accuracy.",
        ),
    ]
