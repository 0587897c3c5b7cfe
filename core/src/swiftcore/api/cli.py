"""The CLI frame, for plugins that contribute a command (``CommandSpec``) and for tests that run the CLI.

A plugin command is a ``click.Command``; decorating it with :func:`plugin_option` and :data:`pass_state` gives
it the same ``--plugin`` option and the same loaded plugin set (``state.plugins()``) as the core's commands;
``cls=PluginOptionsCommand`` gives it the options plugins add to it (``swiftcore_addoption``).
"""

from __future__ import annotations

from swiftcore.cli.main import (
    PLUGIN_OPTIONS,
    CliState,
    PluginOptionsCommand,
    cli,
    main,
    option_names,
    pass_state,
    plugin_args,
    plugin_option,
    with_provider,
)
from swiftcore.options import collect_options

__all__ = [
    "PLUGIN_OPTIONS",
    "CliState",
    "PluginOptionsCommand",
    "cli",
    "collect_options",
    "main",
    "option_names",
    "pass_state",
    "plugin_args",
    "plugin_option",
    "with_provider",
]
