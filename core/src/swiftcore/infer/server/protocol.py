"""The OpenAI request bodies the server accepts (pydantic), and their translation into engine requests.

Unknown fields are ignored, as OpenAI-compatible servers do, so newer clients keep working; fields that
are present are type-checked by pydantic and range-checked by :class:`~swiftcore.infer.types.SamplingParams`,
so a bad value is a 400 naming the field, never a crash.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from swiftcore.infer.errors import InvalidRequestError
from swiftcore.infer.types import SamplingParams

__all__ = [
    "ChatCompletionRequest",
    "ClassifyRequest",
    "CompletionRequest",
    "EmbeddingRequest",
    "RerankRequest",
    "sampling_from",
]


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    n: int = 1
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    repetition_penalty: float | None = None


class ChatCompletionRequest(_Body):
    """``POST /v1/chat/completions``."""

    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    chat_template_kwargs: dict[str, Any] | None = None

    def record(self) -> dict[str, Any]:
        """The swiftcore chat record (what the template encodes)."""
        if self.tool_choice not in (None, "auto", "none"):
            raise InvalidRequestError(
                "tool_choice supports 'auto' and 'none' only (the model decides)", param="tool_choice"
            )
        record: dict[str, Any] = {"messages": self.messages}
        if self.tools and self.tool_choice != "none":
            record["tools"] = self.tools
        if self.chat_template_kwargs:
            record["chat_template_kwargs"] = self.chat_template_kwargs
        return record


class CompletionRequest(_Body):
    """``POST /v1/completions`` (raw prompts, no template)."""

    prompt: str | list[str] | list[int] | list[list[int]]
    echo: bool = False

    def prompts(self) -> list[str | list[int]]:
        """The prompts as a list (a single prompt becomes a list of one)."""
        prompt = self.prompt
        if isinstance(prompt, str):
            return [prompt]
        if prompt and all(isinstance(p, int) for p in prompt):
            return [list(prompt)]  # type: ignore[arg-type]
        if not prompt:
            raise InvalidRequestError("prompt is empty", param="prompt")
        return list(prompt)  # type: ignore[arg-type]


class EmbeddingRequest(BaseModel):
    """``POST /v1/embeddings``."""

    model_config = ConfigDict(extra="ignore")

    model: str
    input: str | list[str] | list[int] | list[list[int]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None

    def inputs(self) -> list[str | list[int]]:
        """The inputs as a list."""
        value = self.input
        if isinstance(value, str):
            return [value]
        if not value:
            raise InvalidRequestError("input is empty", param="input")
        if all(isinstance(v, int) for v in value):
            return [list(value)]  # type: ignore[arg-type]
        return list(value)  # type: ignore[arg-type]


class RerankRequest(BaseModel):
    """``POST /v1/rerank`` (the Cohere / Jina / vLLM shape).

    ``documents`` are strings or ``{"text": ...}`` objects; ``top_n`` keeps the most relevant N;
    ``return_documents`` (default true, as vLLM and Jina) echoes each document's text in its result.
    """

    model_config = ConfigDict(extra="ignore")

    model: str
    query: str
    documents: list[str | dict[str, Any]] = Field(min_length=1)
    top_n: int | None = Field(default=None, ge=1)
    return_documents: bool = True

    def texts(self) -> list[str]:
        """The documents as strings.

        Raises:
            InvalidRequestError: an object without a string ``text``.
        """
        out = []
        for i, doc in enumerate(self.documents):
            text = doc if isinstance(doc, str) else doc.get("text")
            if not isinstance(text, str):
                raise InvalidRequestError("a document object needs a string 'text'", param=f"documents.{i}")
            out.append(text)
        return out


class ClassifyRequest(BaseModel):
    """``POST /v1/classify``: ``input`` is a string or a list of strings."""

    model_config = ConfigDict(extra="ignore")

    model: str
    input: str | list[str]

    def inputs(self) -> list[str]:
        """The inputs as a non-empty list."""
        value = [self.input] if isinstance(self.input, str) else list(self.input)
        if not value:
            raise InvalidRequestError("input is empty", param="input")
        return value


def sampling_from(body: _Body, default_max_tokens: int) -> SamplingParams:
    """Build (and so validate) the sampling parameters of a request body.

    Raises:
        InvalidRequestError: a value is out of range, or ``n`` is not 1.
    """
    if body.n != 1:
        raise InvalidRequestError(f"n={body.n} is not supported; send n=1 (or several requests)", param="n")
    stop = body.stop
    stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
    max_tokens = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    return SamplingParams(
        max_new_tokens=default_max_tokens if max_tokens is None else max_tokens,
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p,
        top_k=body.top_k or 0,
        seed=body.seed,
        stop=stops,
        repetition_penalty=1.0 if body.repetition_penalty is None else body.repetition_penalty,
    )
