"""The swiftcore-eval plugin: the ``swiftcore eval`` command (benchmark accuracy through a served endpoint)."""

from __future__ import annotations

from swiftcore.api import CommandSpec, hookimpl

SWIFTCORE_API = "1.5"  # written against plugin API 1.5: the package face uses swiftcore.api.lazy_exports


@hookimpl
def swiftcore_register_commands() -> list[CommandSpec]:
    """``swiftcore eval``: a benchmark's accuracy, asked through an OpenAI-compatible endpoint by EvalScope."""
    return [
        CommandSpec(
            name="eval",
            target="swiftcore_eval.command:eval_command",
            short_help="Measure a served model's accuracy on a benchmark (EvalScope, OpenAI API).",
        )
    ]
