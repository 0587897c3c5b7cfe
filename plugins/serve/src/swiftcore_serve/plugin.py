"""The swiftcore-serve plugin: the ``swiftcore deploy`` command (an OpenAI-compatible HTTP server), and the hook that
lets a model plugin speak ``POST /v1/audio/speech`` (:mod:`swiftcore_serve.hookspecs`)."""

from __future__ import annotations

from typing import Any

from swiftcore.api import CommandSpec, hookimpl

SWIFTCORE_API = "1.5"  # written against plugin API 1.5: the package face uses swiftcore.api.lazy_exports


@hookimpl
def swiftcore_addhooks(pluginmanager: Any) -> None:
    """Declare ``swiftcore_speech_synthesizer`` (a model plugin gives the server a voice: Qwen3-Omni's talker)."""
    from swiftcore_serve import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


@hookimpl
def swiftcore_register_commands() -> list[CommandSpec]:
    """``swiftcore deploy``: serve a model (any installed backend) behind an OpenAI-compatible API."""
    return [
        CommandSpec(
            name="deploy",
            target="swiftcore_serve.command:deploy",
            short_help="Serve a model behind an OpenAI-compatible API.",
        )
    ]
