"""The :class:`Template` base class: render a record, encode it, parse a generated reply.

A Python template implements :meth:`Template.segments` (the rendering, in pieces that say which
message they render and whether they are an assistant turn or a media placeholder) and
:meth:`Template.generation_prompt`. Everything else (loss policies, tokenization, media positions,
truncation, batching) is here, shared by every template.

The train/serve rule (one for every template): the reply that carries loss — the assistant turns after the last user
message — is trained as exactly the generation prompt inference will use, in the same thinking mode, followed by the
reply and its end-of-turn; history turns stay as the official template renders them. A record's thinking mode is its
``chat_template_kwargs["enable_thinking"]`` when given, else inferred from the reply (one with reasoning is the thinking
form). :meth:`Template.render` stays the official rendering; :meth:`Template.encode` (training) applies the rule.

Every trained reply ends with a stop token: where the rendering ends the last reply with nothing (GLM style, a turn ends
where the next one starts), training appends one to it (:meth:`Template.closing_stop`: the tokenizer's eos when it is a
stop word, else the first stop word that is one special token, else the eos), so the model learns to stop. The prompt
side is untouched, and a rendering that ends the reply with a stop word is never changed.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, ClassVar

from swiftcore.template.conversation import Conversation, normalize_record
from swiftcore.template.encoding import Encoded, check_options, encode_layout, encode_texts, token_views
from swiftcore.template.errors import TemplateError
from swiftcore.template.parsing import split_reasoning
from swiftcore.template.segments import Layout, Segment, Turn, layout_from_segments, prompt_overlap

__all__ = ["Template"]

#: Records per tokenizer call in encode_batch (Rust batch calls of 512 cost 1.2-1.6x the CPU of one 10k call)
_CHUNK = 8192


class Template:
    """A chat template.

    Attributes:
        name: the template's name (set by the registry from the spec when it builds one).
        stop_words: end-of-turn strings that end generation.
        thinking_switch: whether ``chat_template_kwargs["enable_thinking"]`` switches a thinking mode
            (then training infers a record's mode from its reply, see the module docstring).
        reasoning_markers: the ``(start, end)`` strings around reasoning in generated text.
        response_markers: other special tokens :meth:`parse_response` reads (tool-call markers): an
            engine keeps them, and the reasoning markers, in decoded replies and drops other special tokens.
    """

    name: str = ""
    stop_words: ClassVar[tuple[str, ...]] = ()
    roles: ClassVar[tuple[str, ...]] = ("system", "user", "assistant", "tool")
    thinking_switch: ClassVar[bool] = False
    reasoning_markers: ClassVar[tuple[str, str]] = ("<think>", "</think>")
    response_markers: ClassVar[tuple[str, ...]] = ()

    # ------------------------------------------------------------------ to implement

    def segments(self, conv: Conversation, add_generation_prompt: bool) -> list[Segment]:
        """Render ``conv`` in pieces. Raise :class:`TemplateError` where the official template raises."""
        raise NotImplementedError

    def generation_prompt(self, conv: Conversation) -> str:
        """The text ``add_generation_prompt=True`` appends to ``conv`` (depends on its kwargs)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ public API

    def normalize(self, record: Mapping[str, Any] | list) -> Conversation:
        """Validate and normalise a record (see :func:`swiftcore.template.conversation.normalize_record`)."""
        return normalize_record(record)

    def requested_thinking(self, conv: Conversation) -> bool | None:
        """The thinking mode a record asks for in its ``chat_template_kwargs`` (None: it does not say)."""
        value = conv.kwargs.get("enable_thinking")
        return None if value is None else bool(value)

    def reply_has_reasoning(self, conv: Conversation) -> bool:
        """Whether an assistant turn after the last user message carries reasoning (a
        ``reasoning_content``/``reasoning`` field, or reasoning markers in its text content)."""
        end = self.reasoning_markers[1]
        for message in conv.messages[_last_user(conv) + 1 :]:
            if message.get("role") != "assistant":
                continue
            reasoning = message.get("reasoning_content") or message.get("reasoning")
            content = message.get("content")
            if (isinstance(reasoning, str) and reasoning.strip()) or (isinstance(content, str) and end in content):
                return True
        return False

    def thinking_mode(self, record: Mapping[str, Any] | list | Conversation) -> bool | None:
        """The thinking mode a training record is trained in: its ``enable_thinking`` when given, else
        whether its reply carries reasoning; None for a template without a thinking switch."""
        if not self.thinking_switch:
            return None
        conv = record if isinstance(record, Conversation) else self.normalize(record)
        requested = self.requested_thinking(conv)
        return self.reply_has_reasoning(conv) if requested is None else requested

    def training_conversation(self, conv: Conversation) -> Conversation:
        """``conv`` marked for training, with its thinking mode made explicit (see :meth:`thinking_mode`)."""
        kwargs = conv.kwargs
        if self.thinking_switch and self.requested_thinking(conv) is None:
            kwargs = {**kwargs, "enable_thinking": self.reply_has_reasoning(conv)}
        return replace(conv, kwargs=kwargs, training=True)

    def layout(
        self,
        record: Mapping[str, Any] | list | Conversation,
        add_generation_prompt: bool = False,
        *,
        training: bool = False,
        **_: Any,
    ) -> Layout:
        """The rendering with its assistant-turn and media spans.

        Args:
            record: the record (or an already normalised conversation).
            add_generation_prompt: append the generation prompt (inference).
            training: apply the train/serve rule (module docstring) to the reply; without it (and always
                with ``add_generation_prompt``) the rendering is the official one.
        """
        conv = record if isinstance(record, Conversation) else self.normalize(record)
        if training and not add_generation_prompt:
            conv = self.training_conversation(conv)
        try:
            pieces = self.segments(conv, add_generation_prompt)
        except TemplateError as exc:
            raise type(exc)(f"template {self.name!r}: {exc}") from None
        generation_prompt = self.generation_prompt(conv)
        last_user = _last_user(conv)
        if conv.training:
            pieces = _reply_after_generation_prompt(pieces, generation_prompt, last_user)
        return layout_from_segments(pieces, generation_prompt, last_user)

    def render(self, record: Mapping[str, Any] | list, add_generation_prompt: bool = False) -> str:
        """Render a record to text, exactly as the official chat template does.

        Args:
            record: ``{"messages": [...], "tools": [...]?, "chat_template_kwargs": {...}?}``.
            add_generation_prompt: append the assistant header for inference.

        Raises:
            TemplateError: where the official template raises, with a message that says why.
        """
        return self.layout(record, add_generation_prompt).text

    def encode(
        self,
        tokenizer: Any,
        record: Mapping[str, Any] | list,
        add_generation_prompt: bool = False,
        loss_policy: str = "all_assistant",
        max_length: int | None = None,
        truncation: str = "error",
    ) -> Encoded | None:
        """Render and tokenize a record; labels mark the tokens that carry loss.

        Without ``add_generation_prompt`` this is the training encoding: the reply is rendered by the
        train/serve rule (module docstring), so its prefix is token for token the inference prompt.

        Args:
            tokenizer: a Hugging Face (fast) tokenizer or a ``tokenizers.Tokenizer``.
            record: the record.
            add_generation_prompt: append the generation prompt (inference).
            loss_policy: ``all_assistant`` (default), ``last_round`` or ``all``.
            max_length: longest allowed sample in tokens.
            truncation: ``error``, ``truncate_left``, ``truncate_right`` or ``drop``.

        Returns:
            The :class:`Encoded` sample, or None when it is too long and ``truncation="drop"``.
        """
        return self.encode_batch(tokenizer, [record], add_generation_prompt, loss_policy, max_length, truncation)[0]

    def encode_batch(
        self,
        tokenizer: Any,
        records: Sequence[Mapping[str, Any] | list],
        add_generation_prompt: bool = False,
        loss_policy: str = "all_assistant",
        max_length: int | None = None,
        truncation: str = "error",
    ) -> list[Encoded | None]:
        """:meth:`encode` for many records, each with its own kwargs.

        Records are rendered in chunks; each chunk is tokenized in one batch call on a worker thread
        (the Rust tokenizer releases the GIL) while the next chunk renders, so rendering costs little
        on top of tokenizing. The cyclic garbage collector is paused meanwhile (see :func:`_gc_paused`).
        """
        check_options(loss_policy, truncation)  # once, not per sample
        with _gc_paused():
            return self._encode_batch(tokenizer, records, add_generation_prompt, loss_policy, max_length, truncation)

    def _encode_batch(
        self,
        tokenizer: Any,
        records: Sequence[Mapping[str, Any] | list],
        add_generation_prompt: bool,
        loss_policy: str,
        max_length: int | None,
        truncation: str,
    ) -> list[Encoded | None]:

        closing = None if add_generation_prompt else self.closing_stop(tokenizer)

        def render(chunk: Sequence[Any]) -> list[Layout]:
            layouts = [self.layout(r, add_generation_prompt, tokenizer=tokenizer, training=True) for r in chunk]
            if closing is None:
                return layouts
            return [_close_last_reply(lay, *closing) for lay in layouts]

        def finish(chunk: Sequence[Any], layouts: list[Layout], raw: Any) -> list[Encoded | None]:
            return [
                encode_layout(
                    lay,
                    ids,
                    locate,
                    loss_policy=loss_policy,
                    max_length=max_length,
                    truncation=truncation,
                    where=_where(rec),
                    checked=True,
                )
                for lay, (ids, locate), rec in zip(layouts, token_views(raw), chunk, strict=True)
            ]

        if len(records) <= _CHUNK:
            layouts = render(records)
            return finish(records, layouts, encode_texts(tokenizer, [lay.text for lay in layouts]))
        from concurrent.futures import ThreadPoolExecutor

        # The worker thread only runs the tokenizer (GIL released); ids and locators are built here, so
        # the two threads do not trade the GIL back and forth.
        out: list[Encoded | None] = []
        previous = None
        with ThreadPoolExecutor(max_workers=1) as pool:
            for i in range(0, len(records), _CHUNK):
                chunk = records[i : i + _CHUNK]
                layouts = render(chunk)
                future = pool.submit(encode_texts, tokenizer, [lay.text for lay in layouts])
                if previous is not None:
                    out += finish(previous[0], previous[1], previous[2].result())
                previous = (chunk, layouts, future)
            if previous is not None:
                out += finish(previous[0], previous[1], previous[2].result())
        return out

    def stop_words_for(self, tokenizer: Any) -> tuple[str, ...]:
        """The stop words when encoding with ``tokenizer`` (a template that reads the tokenizer overrides it)."""
        return tuple(self.stop_words)

    def closing_stop(self, tokenizer: Any) -> tuple[str, tuple[str, ...]] | None:
        """``(token, ends)``: the stop token training appends to a last reply the rendering ends with none of
        ``ends`` (the stop words and the tokenizer's eos); None when no such token is one special token.

        The token is the tokenizer's eos when it is a stop word (what the generation config stops at), else
        the first stop word that is a special token of the tokenizer, else the eos.
        """
        if tokenizer is None:
            return None
        words = self.stop_words_for(tokenizer)
        eos = getattr(tokenizer, "eos_token", None)
        eos = eos if isinstance(eos, str) and eos else None
        ends = tuple(dict.fromkeys([*words, *([eos] if eos else [])]))
        special = _special_tokens(tokenizer)
        order = ([eos] if eos in words else []) + list(words) + ([eos] if eos else [])
        for word in order:
            if word in special:
                return word, ends
        return None

    def parse_response(self, text: str) -> dict[str, Any]:
        """Split generated text into ``content``, ``reasoning_content`` and ``tool_calls``.

        The base version strips stop words and splits a reasoning block (:attr:`reasoning_markers`);
        templates with tool-call syntax override it.
        """
        for word in self.stop_words:
            text = text.split(word, 1)[0]
        reasoning, content = split_reasoning(text, *self.reasoning_markers)
        return {"content": content, "reasoning_content": reasoning, "tool_calls": []}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector (when it runs) for the duration.

    Encoding allocates a few tracked containers per sample (token-id and label lists, layouts), so the
    collector keeps firing and its older generations re-traverse every list encoded so far: measured
    at ~45 µs/sample on the 10k benchmark corpus, about as much as rendering. Encoding creates no
    reference cycles, so nothing is left for the collector to find; it resumes (if it was on) at the end.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _reply_after_generation_prompt(pieces: list[Segment], generation_prompt: str, last_user: int) -> list[Segment]:
    """Make each reply turn (an ``assistant`` piece after the last user message) follow exactly the
    generation prompt: where the text before its trainable part does not end with the prompt, the part
    of the prompt the turn supplies (its role header) is replaced by the whole prompt.

    Gemma 4, for one, renders a past model turn as ``<|turn>model\nodd<turn|>`` while its prompt with
    thinking off is ``<|turn>model\n<|channel>thought\n<channel|>``: trained unchanged, the model would be
    asked at inference to continue a prompt it never saw.
    """
    out: list[Segment] = []
    before = ""
    for piece in pieces:
        text, kind, message = piece[0], piece[1], piece[2]
        if kind == "assistant" and message is not None and message > last_user:
            overlap = prompt_overlap(text, generation_prompt)
            if not (before + text[:overlap]).endswith(generation_prompt):
                piece = Segment(generation_prompt + text[overlap:], kind, message, piece[3])
        out.append(piece)
        before = (before + piece[0])[-len(generation_prompt) :] if generation_prompt else ""
    return out


def _special_tokens(tokenizer: Any) -> set[str]:
    """The tokenizer's added (special) tokens: each is one token wherever it stands in a text."""
    added = getattr(tokenizer, "get_added_vocab", None)  # a transformers tokenizer
    if callable(added):
        return set(added())
    decoder = getattr(tokenizer, "get_added_tokens_decoder", None)  # a tokenizers.Tokenizer
    if callable(decoder):
        return {str(getattr(t, "content", t)) for t in decoder().values()}
    return set()


def _close_last_reply(layout: Layout, stop: str, ends: tuple[str, ...]) -> Layout:
    """``layout`` with ``stop`` appended to its last turn (and trained with it) when that turn ends the
    rendering (nothing but whitespace after it) and ends with none of ``ends``; otherwise ``layout`` itself."""
    if not layout.turns:
        return layout
    turn = layout.turns[-1]
    text = layout.text
    reply = text[turn.start : turn.end].rstrip()
    if not reply or text[turn.end :].strip() or reply.endswith(ends):
        return layout
    turns = [*layout.turns[:-1], Turn(turn.start, turn.end + len(stop), turn.message)]
    return Layout(text[: turn.end] + stop + text[turn.end :], turns, layout.media, layout.last_user)


def _last_user(conv: Conversation) -> int:
    for index in range(len(conv.messages) - 1, -1, -1):
        if conv.messages[index].get("role") == "user":
            return index
    return -1


def _where(record: Any) -> str:
    if isinstance(record, Mapping) and record.get("id") is not None:
        return f"record {record['id']!r}"
    return "record"
