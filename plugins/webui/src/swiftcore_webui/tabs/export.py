"""The Export tab: ``swiftcore export --merge-lora`` for a LoRA checkpoint."""

from __future__ import annotations

import html
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import gradio as gr

from swiftcore_webui.tabs.common import (
    ENGINE_REFUSALS,
    TAIL,
    exit_failure,
    folder_choice,
    follow,
    made_folder,
    model_choices,
    refused,
)
from swiftcore_webui.ui import WebUI, default_output

__all__ = ["ExportTab", "build", "wire"]


@dataclass
class ExportTab:
    """The Export tab's components that events read or write."""

    model: gr.Dropdown
    out: gr.Textbox
    refresh: gr.Button
    merge: gr.Button
    status: gr.Markdown
    log: gr.Textbox


def build(ui: WebUI) -> ExportTab:
    """Lay the Export tab out: the LoRA checkpoint, the folder of the merged model, the merge button."""
    root = ui.root
    adapters = root.models(adapters_only=True)
    with gr.Tab("Export", id="export"):
        gr.Markdown(
            "Merge a LoRA checkpoint into its base model (`swiftcore export --merge-lora`): the result is a "
            "whole model that loads without peft. Full-tuning checkpoints are whole models already."
        )
        with gr.Row():
            model = folder_choice(adapters, "LoRA checkpoint (a folder with adapter_config.json)", "export-model")
            out = gr.Textbox(
                value=default_output(root, f"{adapters[0]}-merged") if adapters else "merged",
                label="Merged model folder (new)",
                elem_id="export-out",
            )
            refresh = gr.Button("Refresh", size="sm", scale=0)
        merge = gr.Button("Merge LoRA into its base", variant="primary", elem_id="export-merge")
        status = gr.Markdown(elem_id="export-status")
        log = gr.Textbox(label="swiftcore export output", lines=4, max_lines=10, interactive=False)
    return ExportTab(model, out, refresh, merge, status, log)


def wire(ui: WebUI, tab: ExportTab, checkpoint_lists: Sequence[gr.Dropdown]) -> None:
    """Connect the Export tab: a checkpoint proposes its output folder; a merged model is selected in
    ``checkpoint_lists`` (the other tabs' model dropdowns)."""
    root = ui.root

    def unchanged() -> list[Any]:  # a skip per list, made afresh for every answer (an update is a plain dict)
        return [gr.skip() for _ in checkpoint_lists]

    def on_export_model(name: str | None) -> Any:
        return default_output(root, f"{name}-merged") if name else gr.skip()

    def on_export(name: str, out: str) -> Iterator[list[Any]]:
        try:
            job = ui.merge_lora(name or "", out or "")
        except ENGINE_REFUSALS as exc:
            yield [refused(exc), "", *unchanged()]
            return
        for status, log in follow(job):
            yield [status, log, *unchanged()]
        if job.returncode == 0:
            made = made_folder(root, out)
            yield [f"Merged into `{html.escape(made)}`: a whole model.", job.output(tail=TAIL),
                   *(model_choices(root, made) for _ in checkpoint_lists)]  # fmt: skip
        else:
            yield [exit_failure(job), job.output(tail=TAIL), *unchanged()]

    tab.model.change(on_export_model, tab.model, tab.out)
    tab.refresh.click(lambda: gr.Dropdown(choices=root.models(adapters_only=True)), None, tab.model)
    tab.merge.click(on_export, [tab.model, tab.out], [tab.status, tab.log, *checkpoint_lists])
