"""Hook implementation of swiftcore-scaffold: the ``new-plugin`` command, as plain data."""

from __future__ import annotations

from swiftcore.api import CommandSpec, hookimpl

SWIFTCORE_API = "1.4"  # the plugin API this module was written against (a literal: see docs/writing-a-plugin.md)


@hookimpl
def swiftcore_register_commands() -> list[CommandSpec]:
    """``swiftcore new-plugin``: a complete plugin distribution with its contract test."""
    return [
        CommandSpec(
            name="new-plugin",
            target="swiftcore_scaffold.command:new_plugin",
            short_help="Scaffold a new plugin distribution.",
        ),
    ]
