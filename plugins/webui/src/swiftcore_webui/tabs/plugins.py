"""The Plugins tab: ``swiftcore plugins --json``, and ``--check`` (each plugin validated in a fresh process)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import gradio as gr
import pandas as pd

from swiftcore_webui.tabs.common import failed, follow, refused
from swiftcore_webui.ui import Busy, WebUI

__all__ = ["PluginsTab", "build", "listing", "wire"]


@dataclass
class PluginsTab:
    """The Plugins tab's components that events read or write."""

    table: gr.Dataframe
    refresh: gr.Button
    check: gr.Button
    status: gr.Markdown
    checks: gr.Dataframe
    log: gr.Textbox


def build(ui: WebUI) -> PluginsTab:
    """Lay the Plugins tab out: the installed plugins (filled when the page loads) and the ``--check`` results."""
    with gr.Tab("Plugins", id="plugins"):
        gr.Markdown("Installed plugins (`swiftcore plugins --json`, read from package metadata).")
        table = gr.Dataframe(
            headers=["name", "distribution", "version", "status", "provides"],
            interactive=False,
            wrap=True,
            max_height=1400,
            label="Plugins",
            elem_id="plugins-table",
        )
        with gr.Row():
            refresh = gr.Button("Refresh", size="sm")
            check = gr.Button("Run swiftcore plugins --check", variant="primary", elem_id="plugins-check")
        status = gr.Markdown(elem_id="plugins-status")
        checks = gr.Dataframe(
            headers=["plugin", "check", "import s", "problems"],
            interactive=False,
            wrap=True,
            max_height=1400,
            label="--check results",
            elem_id="plugins-checks",
        )
        with gr.Accordion("Command output", open=False):
            log = gr.Textbox(lines=6, max_lines=20, interactive=False, show_label=False)
    return PluginsTab(table, refresh, check, status, checks, log)


def listing(ui: WebUI) -> list[Any]:
    """The plugins table and, when listing them failed, why (the table then stays as it was)."""
    try:
        return [pd.DataFrame(ui.plugins_table()), gr.skip()]
    except RuntimeError as exc:
        return [gr.skip(), failed(exc)]


def wire(ui: WebUI, tab: PluginsTab) -> None:
    """Connect the Plugins tab: list the plugins again, and run ``--check`` (its output while it runs)."""

    def on_plugins() -> list[Any]:
        return listing(ui)

    def on_check() -> Iterator[list[Any]]:
        try:
            job = ui.check_plugins()
        except Busy as exc:
            yield [refused(exc), gr.skip(), gr.skip()]
            return
        for status, log in follow(job):
            yield [status, gr.skip(), log]
        rows = ui.check_rows(job)
        if not rows:
            yield [failed(RuntimeError(f"no report (exit status {job.returncode})")), gr.skip(), job.output()]
            return
        failures = [r["plugin"] for r in rows if r["check"] != "ok"]
        summary = (
            f"--check: {len(rows) - len(failures)} of {len(rows)} plugins ok"
            + (f"; failed: {', '.join(failures)}" if failures else "")
            + f" ({job.seconds:.0f} s)"
        )
        yield [summary, pd.DataFrame(rows), job.output()]

    tab.refresh.click(on_plugins, None, [tab.table, tab.status])
    tab.check.click(on_check, None, [tab.status, tab.checks, tab.log])
