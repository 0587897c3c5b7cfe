"""The page: a gradio ``Blocks`` app over :class:`~swiftcore_webui.ui.WebUI`, one tab per task
(:mod:`swiftcore_webui.tabs`, a module each).

- **Model**: the families the loaded plugins provide, and "make a tiny checkpoint" (``swiftcore make-tiny``).
- **Train**: ``swiftcore train`` in a subprocess; a timer reads its ``logs.jsonl`` every second for the progress,
  the loss plot and the last lines it printed.
- **Chat**: the inference engine of ``swiftcore-infer`` in this process, streaming into the chatbot; images and
  audio can be attached for the families that take them.
- **Export**: ``swiftcore export --merge-lora`` for a LoRA checkpoint.
- **Plugins**: ``swiftcore plugins --json``, and ``--check``.

This module imports gradio: only :mod:`swiftcore_webui.command` imports it, when the page starts.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from swiftcore_webui.tabs import chat, export, model, plugins, train
from swiftcore_webui.ui import WebUI

__all__ = ["CSS", "build_app"]

CSS = """
#train-progress progress { width: 100%; height: 14px; }
.swiftcore-note { font-size: 0.9em; opacity: 0.8; }
"""


def build_app(ui: WebUI) -> gr.Blocks:
    """The page for ``ui`` (launch it with :data:`CSS`)."""
    root = ui.root
    with gr.Blocks(title="swiftcore web UI", analytics_enabled=False) as demo:
        gr.Markdown(
            f"## swiftcore web UI\nRoot: `{root.path}` — every folder and file below is read and written inside it. "
            f"{len(ui.plugins.registry.all('model'))} model families from the loaded plugins."
        )
        # Every tab is laid out before any is wired: some buttons write to a later tab's components.
        with gr.Tabs(selected="model") as tabs:
            model_tab = model.build(ui)
            train_tab = train.build(ui)
            chat_tab = chat.build(ui)
            export_tab = export.build(ui)
            plugins_tab = plugins.build(ui)
        gr.Markdown(
            "Served on this machine only unless started with `--host`; the page has no login. Paths outside the "
            "root are refused (symlinks are followed before checking).",
            elem_classes="swiftcore-note",
        )

        # A new checkpoint (made tiny, or merged) is selected in the lists of the tabs that use one.
        model.wire(ui, model_tab, checkpoint_lists=[train_tab.model, chat_tab.model])
        train.wire(ui, train_tab, chat=chat_tab, tabs=tabs)
        chat.wire(ui, chat_tab)
        export.wire(ui, export_tab, checkpoint_lists=[chat_tab.model, train_tab.model])
        plugins.wire(ui, plugins_tab)

        def on_page_load() -> list[Any]:
            # The plugins table, and the progress of a run started before this page was opened.
            return [*plugins.listing(ui), train.resumed_timer(ui)]

        demo.load(on_page_load, None, [plugins_tab.table, plugins_tab.status, train_tab.timer])
    return demo
