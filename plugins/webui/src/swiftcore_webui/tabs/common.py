"""What the tabs share: the folder dropdowns, refusal messages, and following a command while it runs."""

from __future__ import annotations

import html
import time
from collections.abc import Iterator
from typing import Any

import gradio as gr

from swiftcore.api import SwiftcoreError
from swiftcore_webui.jobs import Job
from swiftcore_webui.paths import PathRefused, Root
from swiftcore_webui.ui import Busy

__all__ = [
    "ENGINE_REFUSALS",
    "REFUSALS",
    "TAIL",
    "exit_failure",
    "failed",
    "folder_choice",
    "follow",
    "made_folder",
    "model_choices",
    "refused",
]

#: How often a running command's output is shown again (seconds).
POLL = 0.5
#: Lines of a command's output the page shows.
TAIL = 40
#: The exceptions a button turns into a message on the page (anything else is a bug and shows as an error).
REFUSALS = (PathRefused, Busy, ValueError, OSError, RuntimeError)
#: The same, for the buttons that reach swiftcore itself (loading a model, chatting, exporting).
ENGINE_REFUSALS = (*REFUSALS, SwiftcoreError)


def folder_choice(choices: list[str], label: str, elem_id: str) -> gr.Dropdown:
    """A dropdown of folders under the root, the first preselected; a typed path is allowed (checked on use)."""
    return gr.Dropdown(
        choices, value=choices[0] if choices else None, allow_custom_value=True, label=label, elem_id=elem_id
    )


def model_choices(root: Root, value: str | None = None) -> Any:
    """An update listing the model folders under ``root`` again, selecting ``value`` (None: the selection stays)."""
    return gr.Dropdown(choices=root.models(), value=value if value is not None else gr.skip())


def refused(exc: BaseException) -> str:
    """The message of a refused action (a bad path, a busy slot, a bad value)."""
    return f"**Refused:** {html.escape(str(exc))}"


def failed(exc: BaseException) -> str:
    """The message of an action that started and failed."""
    return f"**Failed:** {html.escape(str(exc))}"


def exit_failure(job: Job) -> str:
    """The message of a command that exited with an error (its output is shown beside it)."""
    return f"**Failed** (exit status {job.returncode}): see the output."


def made_folder(root: Root, out: str) -> str:
    """The folder a command wrote, relative to the root as the lists show it."""
    return root.relative(root.resolve(out, what="output folder"))


def follow(job: Job) -> Iterator[tuple[str, str]]:
    """``(status, output)`` every half second while ``job`` runs (the caller yields the final values)."""
    while job.running:
        yield f"Running `{html.escape(job.command)}` ({job.seconds:.0f} s) ...", job.output(tail=TAIL)
        time.sleep(POLL)
