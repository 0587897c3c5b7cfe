"""The Train tab: ``swiftcore train`` in a subprocess; a timer reads its ``logs.jsonl`` every second for the progress,
the loss (and eval accuracy) plots and the last lines it printed."""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

import gradio as gr
import pandas as pd

from swiftcore_webui.jobs import TrainProgress
from swiftcore_webui.tabs.chat import ChatTab, load_status
from swiftcore_webui.tabs.common import REFUSALS, TAIL, folder_choice, model_choices, refused
from swiftcore_webui.ui import TrainSettings, WebUI, checkpoint_of, default_output

__all__ = ["TrainTab", "build", "resumed_timer", "wire"]


def _series_frame(points: list[tuple[int, float]], column: str) -> pd.DataFrame:
    """``(step, value)`` points as a plot's data: columns ``step`` and ``column``."""
    # Typed columns even when empty: the plot takes quantitative axes from the dtypes, where an empty frame's object
    # columns would make them nominal. (One series: a colour encoding's legend is fixed by the first, empty value.)
    return pd.DataFrame(
        {
            "step": pd.Series([s for s, _ in points], dtype="int64"),
            column: pd.Series([v for _, v in points], dtype="float64"),
        }
    )


def _loss_frame(progress: TrainProgress | None) -> pd.DataFrame:
    """The training loss against the step (the plot's data; eval losses are in the progress line)."""
    return _series_frame(progress.losses if progress else [], "loss")


def _accuracy_frame(progress: TrainProgress | None) -> pd.DataFrame:
    """The in-training eval accuracy against the step (``--eval-every``; empty without evaluation)."""
    return _series_frame(progress.eval_accuracies if progress else [], "accuracy")


def _chat_checkpoint(progress: TrainProgress | None) -> Any:
    """The checkpoint "chat with this checkpoint" opens: the best by eval accuracy when recorded, else the last."""
    if progress is None:
        return None
    return progress.best_checkpoint or progress.checkpoint


def _progress_html(progress: TrainProgress | None, ui: WebUI) -> str:
    """The progress bar and the line under it: step, losses, eval accuracy, and how the run is (or ended)."""
    if progress is None:
        return "<div id='train-progress'>No training run yet.</div>"
    loss = f" · loss {progress.loss:.4f}" if progress.loss is not None else ""
    if progress.eval_losses:
        loss += f" · eval loss {progress.eval_losses[-1][1]:.4f} (step {progress.eval_losses[-1][0]})"
    if progress.eval_accuracies:
        step, accuracy = progress.eval_accuracies[-1]
        loss += f" · <span id='train-accuracy'>eval accuracy {accuracy:.1%}</span> (step {step})"
    bar = f"<progress value='{progress.step}' max='{max(progress.max_steps, 1)}'></progress>"
    head = f"step {progress.step} / {progress.max_steps} ({progress.fraction:.0%}){loss} · {progress.seconds:.0f} s"
    if progress.running:
        state = "running"
    elif progress.finished:
        shown = f"{progress.loss:.4f}" if progress.loss is not None else "n/a"
        mean = f" (mean {progress.train_loss:.4f})" if progress.train_loss is not None else ""
        ckpt = checkpoint_of(progress.checkpoint, ui.root) or "none found"
        state = f"finished · final loss {shown}{mean} · checkpoint {html.escape(ckpt)}"
        if progress.best_checkpoint is not None:
            best = checkpoint_of(progress.best_checkpoint, ui.root) or "none found"
            state += f" · best by eval accuracy <span id='train-best'>{html.escape(best)}</span>"
    else:
        state = f"failed (exit status {progress.returncode}): see the output below"
    return f"<div id='train-progress'>{bar}<div><b id='train-state'>{state}</b> · {head}</div></div>"


@dataclass
class TrainTab:
    """The Train tab's components that events read or write, in the order of the form."""

    model: gr.Dropdown
    dataset: gr.Dropdown
    refresh: gr.Button
    out: gr.Textbox
    tuner: gr.Radio
    overwrite: gr.Checkbox
    steps: gr.Number
    batch: gr.Number
    lr: gr.Number
    length: gr.Number
    eval_every: gr.Number
    eval_dataset: gr.Dropdown
    start: gr.Button
    stop: gr.Button
    status: gr.Markdown
    progress: gr.HTML
    plot: gr.LinePlot
    accuracy: gr.LinePlot
    log: gr.Textbox
    to_chat: gr.Button
    timer: gr.Timer


def build(ui: WebUI) -> TrainTab:
    """Lay the Train tab out: the form, the progress of the current (or last) run, its plots and output."""
    root = ui.root
    datasets = root.datasets()
    progress = ui.train_progress()  # a run started before this page was opened shows at once
    with gr.Tab("Train", id="train"):
        with gr.Row():
            model = folder_choice(root.models(), "Model folder", "train-model")
            dataset = folder_choice(datasets, "Dataset (.jsonl / .json / .parquet)", "train-dataset")
            refresh = gr.Button("Refresh lists", size="sm", scale=0)
        with gr.Row():
            out = gr.Textbox(value=default_output(root, "runs/run"), label="Output folder", elem_id="train-out")
            tuner = gr.Radio(["lora", "full"], value="lora", label="Tuner")
            overwrite = gr.Checkbox(label="Replace an earlier run there")
        with gr.Row():
            steps = gr.Number(20, precision=0, minimum=1, label="Max steps", elem_id="train-steps")
            batch = gr.Number(8, precision=0, minimum=1, label="Batch size")
            lr = gr.Number(1e-3, minimum=0, label="Learning rate", elem_id="train-lr")
            length = gr.Number(256, precision=0, minimum=8, label="Max length (tokens)")
        with gr.Row():
            eval_every = gr.Number(
                0,
                precision=0,
                minimum=0,
                label="Evaluate every N steps (0: off)",
                info="Greedy answers to the questions below, exact match, as `swiftcore eval` scores",
                elem_id="train-eval-every",
            )
            eval_dataset = folder_choice(datasets, "Eval questions (.jsonl)", "train-eval-dataset")
        with gr.Row():
            start = gr.Button("Start training", variant="primary", elem_id="train-start")
            stop = gr.Button("Stop", variant="stop")
        status = gr.Markdown(elem_id="train-status")
        shown = gr.HTML(_progress_html(progress, ui))
        plot = gr.LinePlot(
            _loss_frame(progress),
            x="step",
            y="loss",
            title="Training loss (from logs.jsonl)",
            height=260,
            elem_id="train-plot",
        )
        accuracy = gr.LinePlot(
            _accuracy_frame(progress),
            x="step",
            y="accuracy",
            y_lim=[0, 1],
            title="Eval accuracy during training (from logs.jsonl)",
            height=220,
            elem_id="train-accuracy-plot",
        )
        log = gr.Textbox(label="swiftcore train output", lines=8, max_lines=16, interactive=False, elem_id="train-log")
        to_chat = gr.Button("Chat with this checkpoint", visible=False, elem_id="train-to-chat")
        timer = gr.Timer(1.0, active=False)
    return TrainTab(
        model, dataset, refresh, out, tuner, overwrite, steps, batch, lr, length, eval_every, eval_dataset,
        start, stop, status, shown, plot, accuracy, log, to_chat, timer,
    )  # fmt: skip


def resumed_timer(ui: WebUI) -> Any:
    """For a page (re)loaded while a run goes on: the progress timer switched on, else left as it is."""
    running = ui.train_run is not None and ui.train_run.job.running
    return gr.Timer(active=running) if running else gr.skip()


def wire(ui: WebUI, tab: TrainTab, chat: ChatTab, tabs: gr.Tabs) -> None:
    """Connect the Train tab: start, stop, the timer's refresh, and "Chat with this checkpoint" (which opens
    ``chat``, one of ``tabs``, with the run's best or last checkpoint loaded)."""
    root = ui.root

    def on_refresh() -> list[Any]:
        return [model_choices(root), gr.Dropdown(choices=root.datasets()), gr.Dropdown(choices=root.datasets())]

    def on_start(model, data, out, tuner, overwrite, steps, batch, lr, length, every, questions) -> list[Any]:
        try:
            settings = TrainSettings(
                model=model or "",
                dataset=data or "",
                output_dir=out or "",
                tuner=tuner,
                max_steps=int(steps or 0),
                batch_size=int(batch or 0),
                learning_rate=float(lr or 0),
                max_length=int(length or 0),
                overwrite=bool(overwrite),
                eval_every=int(every or 0),
                eval_dataset=questions or "",
            )
            run = ui.start_training(settings)
        except REFUSALS as exc:
            return [refused(exc), gr.skip(), gr.Timer(active=False), gr.Button(visible=False)]
        status = f"Started `{html.escape(run.job.command)}`"
        return [status, _progress_html(run.progress(), ui), gr.Timer(active=True), gr.Button(visible=False)]

    def on_tick() -> list[Any]:
        progress = ui.train_progress()
        run = ui.train_run
        log = run.job.output(tail=TAIL) if run else ""
        done = progress is None or not progress.running
        to_chat = gr.Button(visible=bool(progress and progress.finished and progress.checkpoint))
        frames = [_loss_frame(progress), _accuracy_frame(progress)]
        return [_progress_html(progress, ui), *frames, log, gr.Timer(active=not done), to_chat]

    def on_stop() -> str:
        return "Stopped the run." if ui.stop_training() else "No run in progress."

    def on_to_chat() -> list[Any]:
        ckpt = checkpoint_of(_chat_checkpoint(ui.train_progress()), root)
        if not ckpt:
            return [gr.skip(), gr.skip(), "No checkpoint to chat with yet.", [], [], [], ""]
        return [gr.Tabs(selected="chat"), model_choices(root, ckpt), load_status(ui, ckpt), [], [], [], ""]

    form = [tab.model, tab.dataset, tab.out, tab.tuner, tab.overwrite, tab.steps, tab.batch, tab.lr, tab.length,
            tab.eval_every, tab.eval_dataset]  # fmt: skip
    tab.refresh.click(on_refresh, None, [tab.model, tab.dataset, tab.eval_dataset])
    tab.start.click(on_start, form, [tab.status, tab.progress, tab.timer, tab.to_chat])
    tab.timer.tick(on_tick, None, [tab.progress, tab.plot, tab.accuracy, tab.log, tab.timer, tab.to_chat])
    tab.stop.click(on_stop, None, tab.status)
    tab.to_chat.click(on_to_chat, None, [tabs, chat.model, chat.status, *chat.conversation])
