"""Prompts refused on their length before anything tokenizes them (:class:`PromptLimits`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from swiftcore_infer import InvalidRequestError

__all__ = ["ContextLengthError", "PromptLimits"]


class ContextLengthError(InvalidRequestError):
    """The prompt cannot fit the model's context (refused before it is tokenized where possible)."""

    code = "context_length_exceeded"


def _text_chars(value: Any) -> int:
    """Characters in every string inside ``value`` (nested lists and dicts; walked without recursion)."""
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return total


class PromptLimits:
    """Refuse prompts that cannot fit the model's context, on their length, before tokenizing them.

    A token never stands for more characters than its vocabulary entry has (byte-level BPE and SentencePiece
    entries hold at least one character per character they match), so a prompt longer than
    ``max_model_len * longest entry`` characters is over the context whatever its tokens: refusing it is
    never wrong, and the tokenizer never sees more than that bound.

    Args:
        engine: the served engine (its ``max_model_len`` and ``tokenizer``, where it has them).
        max_prompt_chars: the configured limit in characters; None derives it from the model.
    """

    def __init__(self, engine: Any, max_prompt_chars: int | None) -> None:
        self.max_model_len: int | None = getattr(engine, "max_model_len", None)
        tokenizer = getattr(engine, "tokenizer", None)
        self.vocab_size = len(tokenizer) if tokenizer is not None else None
        self.per_token = 0
        if self.max_model_len and tokenizer is not None and hasattr(tokenizer, "get_vocab"):
            self.per_token = max((len(t) for t in tokenizer.get_vocab()), default=0)
        derived = self.max_model_len * self.per_token if self.max_model_len and self.per_token else None
        self.max_chars = max_prompt_chars or derived

    def check_text(self, value: Any, param: str) -> None:
        """Refuse ``value`` (a string, or messages holding strings) when it has too many characters."""
        if self.max_chars is None:
            return
        chars = _text_chars(value)
        if chars > self.max_chars:
            context = f"the model's context of {self.max_model_len} tokens" if self.max_model_len else "this server"
            raise ContextLengthError(
                f"the {param} has {chars} characters, more than {context} can hold ({self.max_chars}); shorten it",
                param=param,
            )

    def check_ids(self, ids: Sequence[int], param: str) -> None:
        """Refuse token ids that are empty, outside the vocabulary, or more than the context holds."""
        if not ids:
            raise InvalidRequestError(f"{param} holds an empty list of token ids", param=param)
        if self.max_model_len and len(ids) > self.max_model_len:
            raise ContextLengthError(
                f"the {param} has {len(ids)} token ids, more than the model's context of {self.max_model_len} tokens",
                param=param,
            )
        if self.vocab_size is not None and any(not 0 <= t < self.vocab_size for t in ids):
            raise InvalidRequestError(f"token ids must be integers in [0, {self.vocab_size})", param=param)

    def check_prompts(self, prompts: Sequence[str | Sequence[int]], param: str) -> None:
        """Check each prompt: a string on its characters, token ids on their count and range."""
        for prompt in prompts:
            if isinstance(prompt, str):
                self.check_text(prompt, param)
            else:
                self.check_ids(prompt, param)
