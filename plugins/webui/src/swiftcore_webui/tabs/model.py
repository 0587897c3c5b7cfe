"""The Model tab: the families the loaded plugins provide, and "make a tiny checkpoint" (``swiftcore make-tiny``)."""

from __future__ import annotations

import html
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import gradio as gr
import pandas as pd

from swiftcore_webui.tabs.common import REFUSALS, TAIL, exit_failure, follow, made_folder, model_choices, refused
from swiftcore_webui.ui import WebUI, default_output

__all__ = ["ModelTab", "build", "wire"]


@dataclass
class ModelTab:
    """The Model tab's components that events read or write."""

    family: gr.Dropdown
    out: gr.Textbox
    force: gr.Checkbox
    make: gr.Button
    status: gr.Markdown
    log: gr.Textbox


def build(ui: WebUI) -> ModelTab:
    """Lay the Model tab out: the families table, and the make-tiny form."""
    families = ui.tiny_families()
    first = families[0] if families else None
    with gr.Tab("Model", id="model"):
        gr.Markdown(
            "Model families the installed plugins provide. No model of your own? Make a tiny random "
            "checkpoint of a family (`swiftcore make-tiny`): real tokenizer and chat template, random weights, "
            "trains and chats in seconds on a CPU."
        )
        gr.Dataframe(value=pd.DataFrame(ui.families()), interactive=False, wrap=True, label="Families")
        with gr.Row():
            family = gr.Dropdown(families, value=first, label="Family", elem_id="tiny-family")
            out = gr.Textbox(
                value=default_output(ui.root, f"tiny-{first}") if first else "",
                label="Output folder (inside the root)",
                elem_id="tiny-out",
            )
            force = gr.Checkbox(label="Replace the folder if it is not empty")
        make = gr.Button("Make a tiny checkpoint", variant="primary", elem_id="tiny-make")
        status = gr.Markdown(elem_id="tiny-status")
        log = gr.Textbox(label="swiftcore make-tiny output", lines=4, max_lines=10, interactive=False)
    return ModelTab(family, out, force, make, status, log)


def wire(ui: WebUI, tab: ModelTab, checkpoint_lists: Sequence[gr.Dropdown]) -> None:
    """Connect the Model tab: a family proposes its output folder; a tiny checkpoint made is selected in
    ``checkpoint_lists`` (the other tabs' model dropdowns)."""
    root = ui.root

    def unchanged() -> list[Any]:  # a skip per list, made afresh for every answer (an update is a plain dict)
        return [gr.skip() for _ in checkpoint_lists]

    def on_family(name: str | None) -> Any:
        return default_output(root, f"tiny-{name}") if name else gr.skip()

    def on_make_tiny(name: str, out: str, force: bool) -> Iterator[list[Any]]:
        try:
            job = ui.make_tiny(name, out, force=force)
        except REFUSALS as exc:
            yield [refused(exc), "", *unchanged(), gr.skip()]
            return
        for status, log in follow(job):
            yield [status, log, *unchanged(), gr.skip()]
        if job.returncode == 0:
            made = made_folder(root, out)
            yield [
                f"Made `{html.escape(made)}` in {job.seconds:.0f} s: train it, or chat with it as it is.",
                job.output(tail=TAIL),
                *(model_choices(root, made) for _ in checkpoint_lists),
                default_output(root, f"tiny-{name}"),
            ]
        else:
            yield [exit_failure(job), job.output(tail=TAIL), *unchanged(), gr.skip()]

    tab.family.change(on_family, tab.family, tab.out)
    tab.make.click(on_make_tiny, [tab.family, tab.out, tab.force], [tab.status, tab.log, *checkpoint_lists, tab.out])
