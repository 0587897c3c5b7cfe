"""The ``jinja`` fallback template: any tokenizer's own ``chat_template``, trainable.

It renders with transformers' chat-template machinery (so the text is what
``tokenizer.apply_chat_template`` gives) and derives the loss mask from the rendering itself:

- a template with ``{% generation %}`` markers trains exactly the marked text;
- otherwise each assistant turn is found by prefix rendering: the conversation up to the turn is a
  prefix of the full rendering, the part of the turn the generation prompt supplies is prompt, and
  the turn ends at its first end-of-turn token. This is the same rule the Python templates follow
  (:func:`swiftcore.template.segments.layout_from_segments`), so both train the same tokens.

A last reply the rendering ends with no end-of-turn token (GLM style: a turn ends where the next one
starts) is trained with a stop token appended, as for every template (:meth:`Template.closing_stop`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from swiftcore.template.base import Template, _last_user
from swiftcore.template.conversation import Conversation
from swiftcore.template.errors import TemplateError
from swiftcore.template.segments import Layout, Turn, prompt_overlap

__all__ = ["END_OF_TURN", "JinjaTemplate", "render_official"]

_GENERATION_TAG = re.compile(r"\{%-?\s*generation\s*-?%\}")

#: End-of-turn tokens of well-known families; the tokenizer's eos token is added to these.
#: ``<|tool_response>`` is Gemma 4's hand-over to a tool after its calls: what follows is the tool's.
END_OF_TURN = (
    "<|im_end|>",
    "<turn|>",
    "<end_of_turn>",
    "<|eot_id|>",
    "<|end|>",
    "<|endoftext|>",
    "<｜end▁of▁sentence｜>",
    "</s>",
    "<|tool_response>",
)


def render_official(
    chat_template: str,
    record: Mapping[str, Any] | Conversation,
    add_generation_prompt: bool = False,
    *,
    generation_indices: bool = False,
    extra: Mapping[str, Any] | None = None,
) -> Any:
    """Render a record with transformers' own chat-template code (``render_jinja_template``).

    Args:
        chat_template: the Jinja source.
        record: a record or a normalised :class:`Conversation`.
        add_generation_prompt: append the generation prompt.
        generation_indices: also return the ``{% generation %}`` character spans.
        extra: template variables besides the record's ``chat_template_kwargs`` (special tokens).

    Returns:
        The text, or ``(text, spans)`` with ``generation_indices=True``.
    """
    from transformers.utils.chat_template_utils import render_jinja_template

    if isinstance(record, Conversation):
        messages, tools, kwargs = record.messages, record.tools, record.kwargs
    else:
        messages, tools = record["messages"], record.get("tools")
        kwargs = record.get("chat_template_kwargs") or {}
    variables = {**(extra or {}), **kwargs}
    rendered, indices = render_jinja_template(
        [messages],
        tools=tools,
        chat_template=chat_template,
        add_generation_prompt=add_generation_prompt,
        return_assistant_tokens_mask=generation_indices,
        **variables,
    )
    return (rendered[0], indices[0]) if generation_indices else rendered[0]


class JinjaTemplate(Template):
    """Renders a tokenizer's ``chat_template``; see the module docstring for the loss mask.

    Args:
        chat_template: the Jinja source; None means "the tokenizer's", taken at encode time.
        end_of_turn: strings that end an assistant turn (default: :data:`END_OF_TURN`).
    """

    name = "jinja"

    def __init__(
        self,
        chat_template: str | None = None,
        end_of_turn: tuple[str, ...] = END_OF_TURN,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        self.chat_template = chat_template
        self.end_of_turn = end_of_turn
        self.extra = dict(extra or {})

    @classmethod
    def from_tokenizer(cls, tokenizer: Any) -> JinjaTemplate:
        """The tokenizer's chat template, its special tokens as template variables and its eos as end of turn."""
        template = getattr(tokenizer, "chat_template", None)
        if not isinstance(template, str) or not template:
            raise TemplateError(
                "the tokenizer has no chat_template (a single string); pass --template with a named template"
            )
        eos = getattr(tokenizer, "eos_token", None)
        ends = END_OF_TURN + ((eos,) if isinstance(eos, str) and eos not in END_OF_TURN else ())
        extra = {k: v for k, v in (getattr(tokenizer, "special_tokens_map", None) or {}).items() if isinstance(v, str)}
        return cls(template, ends, extra)

    @property
    def stop_words(self) -> tuple[str, ...]:  # type: ignore[override]
        return self.end_of_turn

    def stop_words_for(self, tokenizer: Any) -> tuple[str, ...]:
        """The stop words of the template bound to ``tokenizer`` (its eos among them)."""
        return self._bound(tokenizer).stop_words

    def _bound(self, tokenizer: Any) -> JinjaTemplate:
        if self.chat_template is not None or tokenizer is None:
            return self
        return JinjaTemplate.from_tokenizer(tokenizer)

    def _source(self) -> str:
        if self.chat_template is None:
            raise TemplateError(
                "the 'jinja' template renders a tokenizer's chat_template: call encode(tokenizer, ...), or "
                "build it with JinjaTemplate.from_tokenizer(tokenizer) / JinjaTemplate(chat_template=...)"
            )
        return self.chat_template

    def _render(self, conv: Conversation, messages: list, add_generation_prompt: bool, indices: bool = False) -> Any:
        sub = Conversation(messages, conv.tools, conv.kwargs, conv.record_id)
        try:
            return render_official(
                self._source(), sub, add_generation_prompt, generation_indices=indices, extra=self.extra
            )
        except TemplateError:
            raise
        except Exception as exc:  # the Jinja template raised (raise_exception, a type error, ...)
            raise TemplateError(f"{conv.where()}: the chat template raised {type(exc).__name__}: {exc}") from exc

    def generation_prompt(self, conv: Conversation) -> str:
        """The generation prompt the template appends after the whole conversation."""
        full = self._render(conv, conv.messages, False)
        return self._render(conv, conv.messages, True)[len(full) :]

    @property
    def thinking_switch(self) -> bool:  # type: ignore[override]
        """Whether ``enable_thinking`` changes this chat template's generation prompt."""
        return self.chat_template is not None and _has_thinking_switch(self.chat_template, tuple(self.extra.items()))

    def layout(
        self,
        record: Any,
        add_generation_prompt: bool = False,
        tokenizer: Any = None,
        *,
        training: bool = False,
        **_: Any,
    ) -> Layout:
        """Render and find the assistant turns (generation markers or prefix rendering).

        With ``training`` (and prefix rendering), each reply turn follows exactly the generation prompt
        (the train/serve rule of :mod:`swiftcore.template.base`).
        """
        bound = self._bound(tokenizer)
        conv = record if isinstance(record, Conversation) else bound.normalize(record)
        if training and not add_generation_prompt:
            conv = bound.training_conversation(conv)
        if _GENERATION_TAG.search(bound._source()):
            text, marked = bound._render(conv, conv.messages, add_generation_prompt, indices=True)
        else:  # asking transformers for indices without markers only logs a warning
            text, marked = bound._render(conv, conv.messages, add_generation_prompt), []
        if marked:
            return Layout(text=text, turns=bound._marked_turns(conv, text, marked), last_user=_last_user(conv))
        text, turns = bound._prefix_turns(conv, text)
        return Layout(text=text, turns=turns, last_user=_last_user(conv))

    def _marked_turns(self, conv: Conversation, text: str, marked: list) -> list[Turn]:
        assistants = [i for i, m in enumerate(conv.messages) if m.get("role") == "assistant"]
        turns = []
        for k, (start, end) in enumerate(marked):
            message = assistants[k] if k < len(assistants) else len(conv.messages)
            turns.append(Turn(start, end, message))
        return turns

    def _prefix_turns(self, conv: Conversation, text: str) -> tuple[str, list[Turn]]:
        """The turns found by prefix rendering, and the text (a training conversation's reply turns
        spliced to follow the whole generation prompt)."""
        turns = []
        out = text
        shift = 0  # how much longer ``out`` is than ``text`` before the current turn
        last_user = _last_user(conv)
        for index, message in enumerate(conv.messages):
            if message.get("role") != "assistant":
                continue
            before = self._render(conv, conv.messages[:index], False) if index else ""
            if not text.startswith(before):
                raise TemplateError(
                    f"{conv.where(index)}: the chat template renders the conversation before this assistant "
                    "turn differently from the full conversation, so its loss mask cannot be derived by prefix "
                    "rendering; add {% generation %} markers to the template or use a Python template"
                )
            prompt = self._render(conv, conv.messages[:index], True)[len(before) :] if index else ""
            start = len(before) + prompt_overlap(text[len(before) :], prompt)
            if conv.training and index > last_user and prompt and not text[:start].endswith(prompt):
                out = out[: len(before) + shift] + prompt + out[start + shift :]
                shift += len(prompt) - (start - len(before))
            end = self._turn_end(out, start + shift)
            if end == len(out) and index < len(conv.messages) - 1:
                end = self._own_end(conv, index, text, out, start, shift)
            turns.append(Turn(start + shift, end, index))
        return out, turns

    def _own_end(self, conv: Conversation, index: int, text: str, out: str, start: int, shift: int) -> int:
        """Where a turn with no end-of-turn token after it, not the last message, ends: where its own
        rendering does (and after an end-of-turn token that starts there), not at the end of the text, so
        the messages after it are not trained (GLM style with a tokenizer's template: a turn ends where the
        next starts, with ``<|user|>``, which the default end-of-turn tokens do not list)."""
        own = self._render(conv, conv.messages[: index + 1], False)
        if len(own) < start or not text.startswith(own):
            return len(out)  # this turn renders differently when last: keep the old rule
        end = len(own) + shift
        for word in self.end_of_turn:
            if out.startswith(word, end):
                return end + len(word)
        return end

    def _turn_end(self, text: str, start: int) -> int:
        best = len(text)
        for word in self.end_of_turn:
            found = text.find(word, start)
            if found != -1 and found + len(word) < best:
                best = found + len(word)
        return best


@lru_cache(maxsize=32)
def _has_thinking_switch(source: str, extra: tuple[tuple[str, Any], ...]) -> bool:
    """Whether ``enable_thinking`` changes the generation prompt ``source`` renders (probed once)."""
    probe = [{"role": "user", "content": "hi"}]
    try:
        on, off = (
            render_official(source, Conversation(probe, kwargs={"enable_thinking": flag}), True, extra=dict(extra))
            for flag in (True, False)
        )
    except Exception:  # a template that refuses the probe has no switch we can use
        return False
    return on != off
