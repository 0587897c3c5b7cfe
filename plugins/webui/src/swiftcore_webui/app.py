"""The page: a gradio ``Blocks`` app over :class:`~swiftcore_webui.ui.WebUI`, one tab per task.

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

import html
import time
from collections.abc import Iterator
from typing import Any

import gradio as gr
import pandas as pd

from swiftcore_webui.chat import user_message
from swiftcore_webui.jobs import Job, TrainProgress
from swiftcore_webui.paths import PathRefused
from swiftcore_webui.ui import Busy, TrainSettings, WebUI, checkpoint_of, default_output

__all__ = ["CSS", "build_app"]

CSS = """
#train-progress progress { width: 100%; height: 14px; }
.swiftcore-note { font-size: 0.9em; opacity: 0.8; }
"""
#: How often a running command's output is shown again (seconds).
_POLL = 0.5
#: Lines of a command's output the page shows.
_TAIL = 40
#: The exceptions a button turns into a message on the page (anything else is a bug and shows as an error).
_REFUSALS = (PathRefused, Busy, ValueError, OSError, RuntimeError)


def _folder_choice(choices: list[str], label: str, elem_id: str) -> Any:
    """A dropdown of folders under the root, the first preselected; a typed path is allowed (checked on use)."""
    return gr.Dropdown(
        choices, value=choices[0] if choices else None, allow_custom_value=True, label=label, elem_id=elem_id
    )


def _refused(exc: BaseException) -> str:
    return f"**Refused:** {html.escape(str(exc))}"


def _failed(exc: BaseException) -> str:
    return f"**Failed:** {html.escape(str(exc))}"


def _swiftcore_error() -> type[BaseException]:
    from swiftcore.api import SwiftcoreError

    return SwiftcoreError


def _follow(job: Job) -> Iterator[tuple[str, str]]:
    """``(status, output)`` every half second while ``job`` runs (the caller yields the final values)."""
    while job.running:
        yield f"Running `{html.escape(job.command)}` ({job.seconds:.0f} s) ...", job.output(tail=_TAIL)
        time.sleep(_POLL)


#: The thinking choices of the chat tab -> ``enable_thinking`` (None: as the checkpoint was trained).
_THINKING = {"as trained": None, "on": True, "off": False}


def _answer_messages(final: Any) -> list[dict[str, Any]]:
    """The chatbot messages of a finished reply: its reasoning (collapsible) and its content."""
    if final is None:
        return [{"role": "assistant", "content": "(no reply)"}]
    out: list[dict[str, Any]] = []
    cut = " (cut at max new tokens)" if final.finish_reason == "length" else ""
    if final.reasoning:
        out.append({"role": "assistant", "content": final.reasoning, "metadata": {"title": f"Reasoning{cut}"}})
    if final.content:
        out.append({"role": "assistant", "content": final.content})
    elif not final.reasoning:
        out.append({"role": "assistant", "content": "(empty reply: the model ended its turn at once)"})
    elif cut:
        out.append({"role": "assistant", "content": "(no answer after the reasoning: raise max new tokens)"})
    return out


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


def build_app(ui: WebUI) -> gr.Blocks:
    """The page for ``ui`` (launch it with :data:`CSS`)."""
    root = ui.root
    models = root.models()
    datasets = root.datasets()
    families = ui.tiny_families()
    first_family = families[0] if families else None
    skip = gr.skip

    def model_choices(value: str | None = None) -> Any:
        found = root.models()
        return gr.Dropdown(choices=found, value=value if value is not None else skip())

    with gr.Blocks(title="swiftcore web UI", analytics_enabled=False) as demo:
        gr.Markdown(
            f"## swiftcore web UI\nRoot: `{root.path}` — every folder and file below is read and written inside it. "
            f"{len(ui.plugins.registry.all('model'))} model families from the loaded plugins."
        )
        with gr.Tabs(selected="model") as tabs:
            # ---------------------------------------------------------------- Model
            with gr.Tab("Model", id="model"):
                gr.Markdown(
                    "Model families the installed plugins provide. No model of your own? Make a tiny random "
                    "checkpoint of a family (`swiftcore make-tiny`): real tokenizer and chat template, random weights, "
                    "trains and chats in seconds on a CPU."
                )
                gr.Dataframe(value=pd.DataFrame(ui.families()), interactive=False, wrap=True, label="Families")
                with gr.Row():
                    family = gr.Dropdown(families, value=first_family, label="Family", elem_id="tiny-family")
                    tiny_out = gr.Textbox(
                        value=default_output(root, f"tiny-{first_family}") if first_family else "",
                        label="Output folder (inside the root)",
                        elem_id="tiny-out",
                    )
                    tiny_force = gr.Checkbox(label="Replace the folder if it is not empty")
                tiny_btn = gr.Button("Make a tiny checkpoint", variant="primary", elem_id="tiny-make")
                tiny_status = gr.Markdown(elem_id="tiny-status")
                tiny_log = gr.Textbox(label="swiftcore make-tiny output", lines=4, max_lines=10, interactive=False)

            # ---------------------------------------------------------------- Train
            with gr.Tab("Train", id="train"):
                with gr.Row():
                    t_model = _folder_choice(models, "Model folder", "train-model")
                    t_data = _folder_choice(datasets, "Dataset (.jsonl / .json / .parquet)", "train-dataset")
                    t_refresh = gr.Button("Refresh lists", size="sm", scale=0)
                with gr.Row():
                    t_out = gr.Textbox(
                        value=default_output(root, "runs/run"), label="Output folder", elem_id="train-out"
                    )
                    t_tuner = gr.Radio(["lora", "full"], value="lora", label="Tuner")
                    t_overwrite = gr.Checkbox(label="Replace an earlier run there")
                with gr.Row():
                    t_steps = gr.Number(20, precision=0, minimum=1, label="Max steps", elem_id="train-steps")
                    t_batch = gr.Number(8, precision=0, minimum=1, label="Batch size")
                    t_lr = gr.Number(1e-3, minimum=0, label="Learning rate", elem_id="train-lr")
                    t_len = gr.Number(256, precision=0, minimum=8, label="Max length (tokens)")
                with gr.Row():
                    t_eval_every = gr.Number(
                        0,
                        precision=0,
                        minimum=0,
                        label="Evaluate every N steps (0: off)",
                        info="Greedy answers to the questions below, exact match, as `swiftcore eval` scores",
                        elem_id="train-eval-every",
                    )
                    t_eval_data = _folder_choice(datasets, "Eval questions (.jsonl)", "train-eval-dataset")
                with gr.Row():
                    t_start = gr.Button("Start training", variant="primary", elem_id="train-start")
                    t_stop = gr.Button("Stop", variant="stop")
                t_status = gr.Markdown(elem_id="train-status")
                t_progress = gr.HTML(_progress_html(ui.train_progress(), ui))
                t_plot = gr.LinePlot(
                    _loss_frame(ui.train_progress()),
                    x="step",
                    y="loss",
                    title="Training loss (from logs.jsonl)",
                    height=260,
                    elem_id="train-plot",
                )
                t_accuracy = gr.LinePlot(
                    _accuracy_frame(ui.train_progress()),
                    x="step",
                    y="accuracy",
                    y_lim=[0, 1],
                    title="Eval accuracy during training (from logs.jsonl)",
                    height=220,
                    elem_id="train-accuracy-plot",
                )
                t_log = gr.Textbox(
                    label="swiftcore train output", lines=8, max_lines=16, interactive=False, elem_id="train-log"
                )
                t_to_chat = gr.Button("Chat with this checkpoint", visible=False, elem_id="train-to-chat")
                timer = gr.Timer(1.0, active=False)

            # ---------------------------------------------------------------- Chat
            with gr.Tab("Chat", id="chat"):
                with gr.Row():
                    c_model = _folder_choice(models, "Checkpoint folder", "chat-model")
                    c_load = gr.Button("Load", variant="primary", scale=0, elem_id="chat-load")
                c_status = gr.Markdown("No model loaded.", elem_id="chat-status")
                with gr.Accordion("Generation settings", open=False):
                    c_max = gr.Slider(1, 1024, value=64, step=1, label="Max new tokens")
                    c_temp = gr.Slider(0.0, 2.0, value=0.0, step=0.05, label="Temperature (0: greedy)")
                    c_thinking = gr.Radio(
                        list(_THINKING),
                        value="as trained",
                        label="Thinking (chat_template_kwargs.enable_thinking)",
                    )
                    c_system = gr.Textbox(label="System prompt (optional)")
                chatbot = gr.Chatbot(label="Chat", height=340, elem_id="chatbot")
                c_input = gr.MultimodalTextbox(
                    label="Message",
                    show_label=False,
                    placeholder="Message; attach images or audio for a model that takes them",
                    file_types=["image", "audio"],
                    file_count="multiple",
                    sources=["upload"],
                    elem_id="chat-input",
                )
                c_info = gr.Markdown(elem_id="chat-info")
                c_clear = gr.Button("Clear the conversation", size="sm")
                gr.Markdown(
                    "Replies stream from swiftcore's inference engine (transformers backend) in this process, "
                    "prompted with the checkpoint's own chat template as `swiftcore infer` and `deploy` prompt it.",
                    elem_classes="swiftcore-note",
                )
                shown = gr.State([])
                history = gr.State([])

            # ---------------------------------------------------------------- Export
            with gr.Tab("Export", id="export"):
                adapters = root.models(adapters_only=True)
                gr.Markdown(
                    "Merge a LoRA checkpoint into its base model (`swiftcore export --merge-lora`): the result is a "
                    "whole model that loads without peft. Full-tuning checkpoints are whole models already."
                )
                with gr.Row():
                    e_model = _folder_choice(
                        adapters, "LoRA checkpoint (a folder with adapter_config.json)", "export-model"
                    )
                    e_out = gr.Textbox(
                        value=default_output(root, f"{adapters[0]}-merged") if adapters else "merged",
                        label="Merged model folder (new)",
                        elem_id="export-out",
                    )
                    e_refresh = gr.Button("Refresh", size="sm", scale=0)
                e_btn = gr.Button("Merge LoRA into its base", variant="primary", elem_id="export-merge")
                e_status = gr.Markdown(elem_id="export-status")
                e_log = gr.Textbox(label="swiftcore export output", lines=4, max_lines=10, interactive=False)

            # ---------------------------------------------------------------- Plugins
            with gr.Tab("Plugins", id="plugins"):
                gr.Markdown("Installed plugins (`swiftcore plugins --json`, read from package metadata).")
                p_table = gr.Dataframe(
                    headers=["name", "distribution", "version", "status", "provides"],
                    interactive=False,
                    wrap=True,
                    max_height=1400,
                    label="Plugins",
                    elem_id="plugins-table",
                )
                with gr.Row():
                    p_refresh = gr.Button("Refresh", size="sm")
                    p_check = gr.Button("Run swiftcore plugins --check", variant="primary", elem_id="plugins-check")
                p_status = gr.Markdown(elem_id="plugins-status")
                p_checks = gr.Dataframe(
                    headers=["plugin", "check", "import s", "problems"],
                    interactive=False,
                    wrap=True,
                    max_height=1400,
                    label="--check results",
                    elem_id="plugins-checks",
                )
                with gr.Accordion("Command output", open=False):
                    p_log = gr.Textbox(lines=6, max_lines=20, interactive=False, show_label=False)

        gr.Markdown(
            "Served on this machine only unless started with `--host`; the page has no login. Paths outside the "
            "root are refused (symlinks are followed before checking).",
            elem_classes="swiftcore-note",
        )

        # ==================================================================== handlers

        # ---- Model
        def on_family(name: str | None) -> Any:
            return default_output(root, f"tiny-{name}") if name else skip()

        def on_make_tiny(name: str, out: str, force: bool) -> Iterator[list[Any]]:
            try:
                job = ui.make_tiny(name, out, force=force)
            except _REFUSALS as exc:
                yield [_refused(exc), "", skip(), skip(), skip()]
                return
            for status, log in _follow(job):
                yield [status, log, skip(), skip(), skip()]
            if job.returncode == 0:
                made = root.relative(root.resolve(out, what="output folder"))
                yield [
                    f"Made `{html.escape(made)}` in {job.seconds:.0f} s: train it, or chat with it as it is.",
                    job.output(tail=_TAIL),
                    model_choices(made),
                    model_choices(made),
                    default_output(root, f"tiny-{name}"),
                ]
            else:
                status = f"**Failed** (exit status {job.returncode}): see the output."
                yield [status, job.output(tail=_TAIL), skip(), skip(), skip()]

        family.change(on_family, family, tiny_out)
        tiny_btn.click(
            on_make_tiny, [family, tiny_out, tiny_force], [tiny_status, tiny_log, t_model, c_model, tiny_out]
        )

        # ---- Train
        def on_refresh() -> list[Any]:
            return [model_choices(), gr.Dropdown(choices=root.datasets()), gr.Dropdown(choices=root.datasets())]

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
            except _REFUSALS as exc:
                return [_refused(exc), skip(), gr.Timer(active=False), gr.Button(visible=False)]
            status = f"Started `{html.escape(run.job.command)}`"
            return [status, _progress_html(run.progress(), ui), gr.Timer(active=True), gr.Button(visible=False)]

        def on_tick() -> list[Any]:
            progress = ui.train_progress()
            run = ui.train_run
            log = run.job.output(tail=_TAIL) if run else ""
            done = progress is None or not progress.running
            to_chat = gr.Button(visible=bool(progress and progress.finished and progress.checkpoint))
            frames = [_loss_frame(progress), _accuracy_frame(progress)]
            return [_progress_html(progress, ui), *frames, log, gr.Timer(active=not done), to_chat]

        def on_stop() -> str:
            return "Stopped the run." if ui.stop_training() else "No run in progress."

        def on_to_chat() -> list[Any]:
            progress = ui.train_progress()
            ckpt = checkpoint_of(_chat_checkpoint(progress), root)
            if not ckpt:
                return [skip(), skip(), "No checkpoint to chat with yet.", [], [], [], ""]
            status = _load_status(ckpt)
            return [gr.Tabs(selected="chat"), model_choices(ckpt), status, [], [], [], ""]

        t_refresh.click(on_refresh, None, [t_model, t_data, t_eval_data])
        t_start.click(
            on_start,
            [t_model, t_data, t_out, t_tuner, t_overwrite, t_steps, t_batch, t_lr, t_len, t_eval_every, t_eval_data],
            [t_status, t_progress, timer, t_to_chat],
        )
        timer.tick(on_tick, None, [t_progress, t_plot, t_accuracy, t_log, timer, t_to_chat])
        t_stop.click(on_stop, None, t_status)
        t_to_chat.click(on_to_chat, None, [tabs, c_model, c_status, chatbot, shown, history, c_info])

        # ---- Chat
        def _load_status(model: str | None) -> str:
            try:
                return ui.load_model(model or "").describe()
            except (*_REFUSALS, _swiftcore_error()) as exc:
                return _refused(exc)

        def on_load(model: str | None) -> list[Any]:
            return [_load_status(model), [], [], [], ""]

        def on_send(value, shown_now, history_now, max_new, temperature, thinking, system) -> Iterator[list[Any]]:
            value = value or {}
            text = (value.get("text") or "").strip()
            files = [f if isinstance(f, str) else f.get("path") for f in value.get("files") or []]
            files = [f for f in files if f]
            if not text and not files:
                yield [skip(), skip(), skip(), skip(), skip()]
                return
            try:
                user = user_message(text, files)
            except OSError as exc:
                gr.Warning(f"cannot read the attached file: {exc}")
                yield [skip(), skip(), skip(), skip(), skip()]
                return
            view = [*shown_now, *({"role": "user", "content": {"path": f}} for f in files)]
            if text:
                view.append({"role": "user", "content": text})
            pending = {"role": "assistant", "content": "..."}
            started = time.perf_counter()
            yield [gr.MultimodalTextbox(value=None), [*view, pending], view, history_now, "Generating ..."]
            final = None
            try:
                for reply in ui.reply(
                    [*history_now, user],
                    max_new_tokens=int(max_new),
                    temperature=float(temperature),
                    system=system or None,
                    enable_thinking=_THINKING[thinking],
                ):
                    if reply.done:
                        final = reply
                        break
                    yield [skip(), [*view, {"role": "assistant", "content": reply.text}], skip(), skip(), skip()]
            except (*_REFUSALS, _swiftcore_error()) as exc:
                view = [*view, {"role": "assistant", "content": f"Error: {exc}"}]
                # the refused turn is not kept in the conversation
                yield [skip(), view, view, history_now, "Refused: the turn was not added to the conversation."]
                return
            view = [*view, *_answer_messages(final)]
            content = final.content if final else ""
            seconds = time.perf_counter() - started
            number = sum(m.get("role") == "assistant" for m in history_now) + 1
            info = (
                f"Reply {number}: {final.tokens} tokens in {seconds:.1f} s (finish reason: {final.finish_reason})."
                if final
                else f"Reply {number}: none."
            )
            yield [skip(), view, view, [*history_now, user, {"role": "assistant", "content": content}], info]

        c_load.click(on_load, c_model, [c_status, chatbot, shown, history, c_info])
        c_input.submit(
            on_send,
            [c_input, shown, history, c_max, c_temp, c_thinking, c_system],
            [c_input, chatbot, shown, history, c_info],
        )
        c_clear.click(lambda: [[], [], [], ""], None, [chatbot, shown, history, c_info])

        # ---- Export
        def on_export_model(name: str | None) -> Any:
            return default_output(root, f"{name}-merged") if name else skip()

        def on_export(name: str, out: str) -> Iterator[list[Any]]:
            try:
                job = ui.merge_lora(name or "", out or "")
            except (*_REFUSALS, _swiftcore_error()) as exc:
                yield [_refused(exc), "", skip(), skip()]
                return
            for status, log in _follow(job):
                yield [status, log, skip(), skip()]
            if job.returncode == 0:
                made = root.relative(root.resolve(out, what="output folder"))
                yield [f"Merged into `{html.escape(made)}`: a whole model.", job.output(tail=_TAIL),
                       model_choices(made), model_choices(made)]  # fmt: skip
            else:
                status = f"**Failed** (exit status {job.returncode}): see the output."
                yield [status, job.output(tail=_TAIL), skip(), skip()]

        e_model.change(on_export_model, e_model, e_out)
        e_refresh.click(lambda: gr.Dropdown(choices=root.models(adapters_only=True)), None, e_model)
        e_btn.click(on_export, [e_model, e_out], [e_status, e_log, c_model, t_model])

        # ---- Plugins
        def on_plugins() -> list[Any]:
            try:
                return [pd.DataFrame(ui.plugins_table()), skip()]
            except RuntimeError as exc:
                return [skip(), _failed(exc)]

        def on_check() -> Iterator[list[Any]]:
            try:
                job = ui.check_plugins()
            except Busy as exc:
                yield [_refused(exc), skip(), skip()]
                return
            for status, log in _follow(job):
                yield [status, skip(), log]
            rows = ui.check_rows(job)
            if not rows:
                yield [_failed(RuntimeError(f"no report (exit status {job.returncode})")), skip(), job.output()]
                return
            failed = [r["plugin"] for r in rows if r["check"] != "ok"]
            summary = (
                f"--check: {len(rows) - len(failed)} of {len(rows)} plugins ok"
                + (f"; failed: {', '.join(failed)}" if failed else "")
                + f" ({job.seconds:.0f} s)"
            )
            yield [summary, pd.DataFrame(rows), job.output()]

        p_refresh.click(on_plugins, None, [p_table, p_status])
        p_check.click(on_check, None, [p_status, p_checks, p_log])

        # ---- page load: the plugins table, and the progress of a run started earlier
        def on_page_load() -> list[Any]:
            table, status = on_plugins()
            running = ui.train_run is not None and ui.train_run.job.running
            return [table, status, gr.Timer(active=running) if running else skip()]

        demo.load(on_page_load, None, [p_table, p_status, timer])
    return demo
