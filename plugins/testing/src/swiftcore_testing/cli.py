"""Run the ``swiftcore`` CLI in-process from a test (torch and transformers are imported once per session)."""

from __future__ import annotations

import traceback

import pytest

__all__ = ["run_cli"]


def run_cli(*args: str) -> str:
    """Run ``swiftcore ARGS`` in-process and return its output; fail the test (with the traceback) on error.

    The CLI exports its plugin set to ``SWIFTCORE_PLUGINS`` for child processes; those variables are unset
    for the call and restored after it, so one command's plugin set never leaks into the next.
    """
    from click.testing import CliRunner

    from swiftcore.api.cli import cli

    result = CliRunner().invoke(cli, list(args), env={"SWIFTCORE_PLUGINS": None, "SWIFTCORE_PLUGINS_STRICT": None})
    if result.exit_code != 0:
        trace = "".join(traceback.format_exception(*result.exc_info)) if result.exc_info else ""
        pytest.fail(f"swiftcore {' '.join(args)} exited {result.exit_code}:\n{result.output[-3000:]}\n{trace}")
    return result.output
