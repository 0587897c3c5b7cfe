"""The Chat tab: the inference engine of ``swiftcore-infer`` in this process, streaming into the chatbot; images and
audio can be attached for the families that take them, and tools (OpenAI function tools, as JSON) offered: the
reply's tool calls are shown parsed."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import gradio as gr

from swiftcore_webui.chat import user_message
from swiftcore_webui.tabs.common import ENGINE_REFUSALS, folder_choice, refused
from swiftcore_webui.ui import WebUI

__all__ = ["ChatTab", "build", "load_status", "parse_tools", "wire"]

#: The thinking choices -> ``enable_thinking`` (None: as the checkpoint was trained).
_THINKING = {"as trained": None, "on": True, "off": False}


def _answer_messages(final: Any) -> list[dict[str, Any]]:
    """The chatbot messages of a finished reply: its reasoning (collapsible), its content and its tool calls."""
    if final is None:
        return [{"role": "assistant", "content": "(no reply)"}]
    out: list[dict[str, Any]] = []
    cut = " (cut at max new tokens)" if final.finish_reason == "length" else ""
    if final.reasoning:
        out.append({"role": "assistant", "content": final.reasoning, "metadata": {"title": f"Reasoning{cut}"}})
    if final.content:
        out.append({"role": "assistant", "content": final.content})
    for call in final.tool_calls:  # shown, not run: the page runs no tool
        function = call.get("function") or {}
        shown = f"Tool call: `{function.get('name')}({function.get('arguments')})`"
        out.append({"role": "assistant", "content": shown})
    if final.content or final.tool_calls:
        return out
    if not final.reasoning:
        out.append({"role": "assistant", "content": "(empty reply: the model ended its turn at once)"})
    elif cut:
        out.append({"role": "assistant", "content": "(no answer after the reasoning: raise max new tokens)"})
    return out


@dataclass
class ChatTab:
    """The Chat tab's components that events read or write."""

    model: gr.Dropdown
    load: gr.Button
    status: gr.Markdown
    max_new: gr.Slider
    temperature: gr.Slider
    thinking: gr.Radio
    system: gr.Textbox
    tools: gr.Textbox
    chatbot: gr.Chatbot
    message: gr.MultimodalTextbox
    info: gr.Markdown
    clear: gr.Button
    #: The messages the chatbot shows (media bubbles, reasoning and errors included).
    shown: gr.State
    #: The conversation the model is sent (user turns with their media, and the replies' content).
    history: gr.State

    @property
    def conversation(self) -> list[Any]:
        """What a new conversation empties: the chatbot, both message lists and the reply line."""
        return [self.chatbot, self.shown, self.history, self.info]


def build(ui: WebUI) -> ChatTab:
    """Lay the Chat tab out: the checkpoint to load, generation settings, the chatbot and the message box."""
    with gr.Tab("Chat", id="chat"):
        with gr.Row():
            model = folder_choice(ui.root.models(), "Checkpoint folder", "chat-model")
            load = gr.Button("Load", variant="primary", scale=0, elem_id="chat-load")
        status = gr.Markdown("No model loaded.", elem_id="chat-status")
        with gr.Accordion("Generation settings", open=False):
            max_new = gr.Slider(1, 1024, value=64, step=1, label="Max new tokens")
            temperature = gr.Slider(0.0, 2.0, value=0.0, step=0.05, label="Temperature (0: greedy)")
            thinking = gr.Radio(
                list(_THINKING), value="as trained", label="Thinking (chat_template_kwargs.enable_thinking)"
            )
            system = gr.Textbox(label="System prompt (optional)")
            tools = gr.Textbox(
                label="Tools (optional): a JSON list of OpenAI function tools offered with each message",
                lines=2,
                elem_id="chat-tools",
            )
        chatbot = gr.Chatbot(label="Chat", height=340, elem_id="chatbot")
        box = gr.MultimodalTextbox(
            label="Message",
            show_label=False,
            placeholder="Message; attach images or audio for a model that takes them",
            file_types=["image", "audio"],
            file_count="multiple",
            sources=["upload"],
            elem_id="chat-input",
        )
        info = gr.Markdown(elem_id="chat-info")
        clear = gr.Button("Clear the conversation", size="sm")
        gr.Markdown(
            "Replies stream from swiftcore's inference engine (transformers backend) in this process, "
            "prompted with the checkpoint's own chat template as `swiftcore infer` and `deploy` prompt it.",
            elem_classes="swiftcore-note",
        )
        shown = gr.State([])
        history = gr.State([])
    return ChatTab(
        model, load, status, max_new, temperature, thinking, system, tools, chatbot, box, info, clear, shown, history
    )


def parse_tools(text: str | None) -> list[dict[str, Any]] | None:
    """The Tools box: empty is None, else a JSON list of tools.

    Raises:
        ValueError: not a JSON list of objects (the message says what to write).
    """
    if not (text or "").strip():
        return None
    try:
        value = json.loads(text or "")
    except ValueError as exc:
        raise ValueError(f"Tools: not valid JSON ({exc})") from exc
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise ValueError('Tools: a JSON list of tools, e.g. [{"type": "function", "function": {"name": ...}}]')
    return value


def load_status(ui: WebUI, model: str | None) -> str:
    """Load ``model`` for chatting; what was loaded (family, adapter, media it takes), or why it was refused."""
    try:
        return ui.load_model(model or "").describe()
    except ENGINE_REFUSALS as exc:
        return refused(exc)


def wire(ui: WebUI, tab: ChatTab) -> None:
    """Connect the Chat tab: load a checkpoint (a new conversation), send a message (the reply streams in), clear."""

    def on_load(model: str | None) -> list[Any]:
        return [load_status(ui, model), [], [], [], ""]

    def on_send(value, shown_now, history_now, max_new, temperature, thinking, system, tools) -> Iterator[list[Any]]:
        skip = gr.skip
        value = value or {}
        try:
            offered = parse_tools(tools)
        except ValueError as exc:
            gr.Warning(str(exc))
            yield [skip(), skip(), skip(), skip(), skip()]
            return
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
                tools=offered,
            ):
                if reply.done:
                    final = reply
                    break
                yield [skip(), [*view, {"role": "assistant", "content": reply.text}], skip(), skip(), skip()]
        except ENGINE_REFUSALS as exc:
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
        reply = {"role": "assistant", "content": content}
        if final is not None and final.tool_calls:
            reply["tool_calls"] = list(final.tool_calls)
        yield [skip(), view, view, [*history_now, user, reply], info]

    tab.load.click(on_load, tab.model, [tab.status, *tab.conversation])
    tab.message.submit(
        on_send,
        [tab.message, tab.shown, tab.history, tab.max_new, tab.temperature, tab.thinking, tab.system, tab.tools],
        [tab.message, *tab.conversation],
    )
    tab.clear.click(lambda: [[], [], [], ""], None, tab.conversation)
