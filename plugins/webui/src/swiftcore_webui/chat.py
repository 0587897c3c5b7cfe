"""Chatting with a checkpoint: the inference engine of ``swiftcore infer`` and ``swiftcore deploy``, in-process.

The engine is the one ``swiftcore-infer`` builds (:func:`swiftcore_infer.command.build_engine`, the transformers
backend): the checkpoint's own template, the chat defaults it was trained with, its stop tokens, and for families
that take images or audio (``ModelSpec.modalities``, when the checkpoint has its processor files) training's own
media path. Replies are streamed with :meth:`Engine.stream`, as the server streams them.

Uploaded images and audio are read here and handed to the engine as inline data (``{"data": base64}``, the shape
the server passes on), so the engine opens no path. Engines are not thread-safe: one lock serialises loading and
generation.

The values of the options plugins add to ``swiftcore web-ui`` (``swiftcore_addoption``) go to every engine built, as
``swiftcore infer`` passes its own: ``--agent-template hermes`` gives an OLMoE checkpoint the ``olmoe_hermes``
template (swiftcore-infer's ``swiftcore_infer_template`` hook). A message may offer ``tools`` (OpenAI function tools);
the reply's calls come back parsed (:attr:`Reply.tool_calls`).

Importing this module imports no gradio, torch or transformers.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swiftcore_webui.paths import Root

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = ["ChatSession", "LoadedModel", "Reply", "user_message"]

#: File suffixes the page treats as audio; any other uploaded file is sent as an image.
AUDIO_SUFFIXES = (".wav", ".mp3", ".flac", ".ogg", ".m4a", ".webm")


@dataclass(frozen=True)
class LoadedModel:
    """What is loaded: shown on the page.

    Attributes:
        model_dir: the checkpoint (or LoRA adapter) folder, relative to the root.
        base_dir: its base model folder, relative to the root (the same for a full checkpoint).
        spec: the model spec's name.
        template: the chat template's name.
        modalities: the media the engine takes for this checkpoint (``image``, ``audio``; empty: text only).
    """

    model_dir: str
    base_dir: str
    spec: str
    template: str
    modalities: tuple[str, ...]

    def describe(self) -> str:
        """One Markdown line for the page."""
        base = f" (LoRA adapter on `{self.base_dir}`)" if self.base_dir != self.model_dir else ""
        takes = (
            f"It takes **{' and '.join(self.modalities)}**: attach files to a message."
            if self.modalities
            else "It is text-only: attached images or audio are refused."
        )
        return (
            f"Loaded `{self.model_dir}`{base}: model `{self.spec}`, template `{self.template}`, "
            f"transformers backend. {takes}"
        )


@dataclass(frozen=True)
class Reply:
    """A streamed reply: the raw text so far; once ``done``, the template's parse of it.

    Attributes:
        text: the generated text so far (special tokens a reply never shows left out).
        content: the reply (``done`` only).
        reasoning: its reasoning (thinking) part, if any (``done`` only).
        done: the generation finished.
        finish_reason: ``stop`` (end of turn or a stop string) or ``length`` (max new tokens).
        tokens: the tokens generated (``done`` only).
        prompt_tokens: the prompt's length in tokens (``done`` only).
        tool_calls: the OpenAI tool calls the template parsed from the reply (``done`` only).
    """

    text: str
    content: str = ""
    reasoning: str = ""
    done: bool = False
    finish_reason: str | None = None
    tokens: int = 0
    prompt_tokens: int = 0
    tool_calls: tuple[dict[str, Any], ...] = ()


def _media_part(path: str) -> dict[str, Any]:
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    kind = "audio" if path.lower().endswith(AUDIO_SUFFIXES) else "image"
    return {"type": kind, kind: {"data": data}}


def user_message(text: str, files: Sequence[str] = ()) -> dict[str, Any]:
    """A user turn as the engine reads it: plain text, or content parts (the media first, then the text), as
    ``swiftcore infer --image/--audio`` builds them."""
    if not files:
        return {"role": "user", "content": text}
    parts = [_media_part(f) for f in files]
    if text:
        parts.append({"type": "text", "text": text})
    return {"role": "user", "content": parts}


class ChatSession:
    """The page's model: at most one engine, loaded from a folder inside the root.

    Args:
        root: the web UI's root (the checkpoint and, for an adapter, its base must be inside it).
        plugins: the loaded plugin set.
        options: the values of the options plugins added to ``swiftcore web-ui`` (passed to every engine built).
    """

    def __init__(self, root: Root, plugins: PluginSet, options: Mapping[str, Any] | None = None) -> None:
        self.root = root
        self.plugins = plugins
        self.options = dict(options or {})
        self.engine: Any = None
        self.loaded: LoadedModel | None = None
        self._lock = threading.Lock()

    def load(self, model: str) -> LoadedModel:
        """Load ``model`` (a checkpoint or a peft LoRA adapter folder), replacing the loaded one.

        Raises:
            PathRefused: the folder, or an adapter's base model, is outside the root.
            SwiftcoreError: it is not a checkpoint swiftcore can serve (the engine's own message).
        """
        from swiftcore_infer import build_engine

        from swiftcore.api.models import resolve_checkpoint

        model_dir = self.root.resolve(model, what="model folder", must_exist=True, kind="dir")
        base, adapter = resolve_checkpoint(model_dir)
        base = self.root.resolve(str(base), what="its base model (adapter_config.json)", must_exist=True, kind="dir")
        with self._lock:
            self._close()
            engine = build_engine(
                self.plugins,
                model=str(model_dir),
                adapter=None,
                backend="transformers",
                template=None,
                model_type=None,
                dtype="float32",
                merge_lora=False,
                engine_option=(),
                options=self.options,
            )
            self.engine = engine
            self.loaded = LoadedModel(
                model_dir=self.root.relative(model_dir),
                base_dir=self.root.relative(base if adapter else model_dir),
                spec=engine.spec.name,
                template=engine.template.name,
                modalities=tuple(m for m in engine.media_modalities if m in ("image", "audio")),
            )
            return self.loaded

    def stream(
        self,
        messages: list[dict[str, Any]],
        *,
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        system: str | None = None,
        enable_thinking: bool | None = None,
        tools: list[dict[str, Any]] | None = None,
    ) -> Iterator[Reply]:
        """Stream the reply to ``messages`` (the conversation so far, the user's turn last): a :class:`Reply` with the
        text so far once per new piece, then the finished one (``done``), parsed by the template.

        Args:
            enable_thinking: ``chat_template_kwargs.enable_thinking`` of the request; None prompts the checkpoint
                as it was trained (the default of ``swiftcore infer`` and ``deploy``).
            tools: OpenAI function tools offered with the message (the request's ``tools``), or None.

        Raises:
            SwiftcoreError: no model is loaded, or the engine refuses the request (e.g. media the model does not
                take); raised before anything is yielded.
        """
        from swiftcore_infer import Request, SamplingParams

        from swiftcore.api import SwiftcoreError

        record: dict[str, Any] = {"messages": ([{"role": "system", "content": system}] if system else []) + messages}
        if enable_thinking is not None:
            record["chat_template_kwargs"] = {"enable_thinking": enable_thinking}
        if tools:
            record["tools"] = list(tools)
        sampling = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature)
        with self._lock:
            if self.engine is None:
                raise SwiftcoreError("no model is loaded: pick a checkpoint and press Load")
            pieces = self.engine.stream(Request(record=record, sampling=sampling))
            text = ""
            try:
                for delta in pieces:
                    final = delta.final
                    if final is not None:
                        if final.error:
                            raise SwiftcoreError(f"generation failed: {final.error}")
                        yield Reply(
                            text=final.text,
                            content=final.content or "",
                            reasoning=final.reasoning_content or "",
                            done=True,
                            finish_reason=final.finish_reason,
                            tokens=final.completion_tokens,
                            prompt_tokens=final.prompt_tokens,
                            tool_calls=tuple(final.tool_calls or ()),
                        )
                        return
                    if delta.text:
                        text += delta.text
                        yield Reply(text=text)
            finally:
                close = getattr(pieces, "close", None)
                if callable(close):
                    close()

    def _close(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None
            self.loaded = None

    def close(self) -> None:
        """Free the loaded model."""
        with self._lock:
            self._close()
