"""The swiftcore-webui plugin: the ``swiftcore web-ui`` command (a local gradio page over the CLI)."""

from __future__ import annotations

from swiftcore.api import CommandSpec, hookimpl

SWIFTCORE_API = "1.4"  # the plugin API this module was written against (a literal: see docs/writing-a-plugin.md)


@hookimpl
def swiftcore_register_commands() -> list[CommandSpec]:
    """``swiftcore web-ui``: make tiny models, train, chat, export and check plugins from a browser."""
    return [
        CommandSpec(
            name="web-ui",
            target="swiftcore_webui.command:web_ui",
            short_help="A local web page (gradio) to make, train, chat with and export models.",
        )
    ]
