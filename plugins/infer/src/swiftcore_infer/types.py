"""The data that flows through every engine: sampling parameters, requests and generations.

They are plain dataclasses with no torch in them, so that the server, the CLI and the backends agree
on one shape whatever the backend.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from swiftcore_infer.errors import InvalidRequestError, error_text

__all__ = ["MAX_TOP_LOGPROBS", "Generation", "Request", "SamplingParams", "StreamDelta", "TokenLogprob"]

#: The most alternatives a log-probability request may ask for per token (OpenAI's and vLLM's default limit).
MAX_TOP_LOGPROBS = 20


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one request.

    Attributes:
        max_new_tokens: the most tokens to generate (>= 1).
        temperature: 0 means greedy decoding.
        top_p: nucleus sampling mass in (0, 1].
        top_k: keep the k most likely tokens (0 = all).
        seed: a random seed for sampling (None = unseeded).
        stop: extra stop strings; the template's end-of-turn tokens always stop.
        repetition_penalty: 1.0 = none.
        logprobs: when streaming, also report each generated token's raw log-probability and this many most likely
            alternatives (0 to :data:`MAX_TOP_LOGPROBS`) in :attr:`StreamDelta.logprobs`, where the backend reports
            them as it generates; None (the default): none.
    """

    max_new_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    repetition_penalty: float = 1.0
    logprobs: int | None = None

    def __post_init__(self) -> None:
        # Validated here so every entry point (CLI, server, Python) rejects the same values the same way.
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise InvalidRequestError(
                f"max_tokens must be an integer >= 1, got {self.max_new_tokens!r}", param="max_tokens"
            )
        if not isinstance(self.temperature, (int, float)) or not 0 <= self.temperature <= 100:
            raise InvalidRequestError(f"temperature must be in [0, 100], got {self.temperature!r}", param="temperature")
        if not isinstance(self.top_p, (int, float)) or not 0 < self.top_p <= 1:
            raise InvalidRequestError(f"top_p must be in (0, 1], got {self.top_p!r}", param="top_p")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise InvalidRequestError(f"top_k must be an integer >= 0, got {self.top_k!r}", param="top_k")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise InvalidRequestError(f"seed must be an integer, got {self.seed!r}", param="seed")
        if not isinstance(self.stop, tuple) or not all(isinstance(s, str) and s for s in self.stop):
            raise InvalidRequestError(f"stop must be a list of non-empty strings, got {self.stop!r}", param="stop")
        if not isinstance(self.repetition_penalty, (int, float)) or self.repetition_penalty <= 0:
            raise InvalidRequestError(
                f"repetition_penalty must be > 0, got {self.repetition_penalty!r}", param="repetition_penalty"
            )
        top = self.logprobs
        if top is not None and (isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= MAX_TOP_LOGPROBS):
            raise InvalidRequestError(
                f"logprobs must be an integer in [0, {MAX_TOP_LOGPROBS}] or None, got {self.logprobs!r}",
                param="top_logprobs",
            )

    @property
    def greedy(self) -> bool:
        """True for greedy decoding."""
        return self.temperature == 0


@dataclass
class Request:
    """One generation request.

    Exactly one of ``record`` (a chat record, encoded by the swiftcore template) and ``prompt`` (raw
    text, or token ids, for ``/v1/completions``) is set.

    Attributes:
        record: ``{"messages": [...], "tools": [...]?, "chat_template_kwargs": {...}?}``.
        prompt: raw text or token ids, used as is (no template).
        sampling: the sampling parameters.
        adapter: the name of a loaded LoRA adapter, or None for the base model.
        request_id: an id for logs and errors.
        encoded: the prompt ids the engine last encoded this request into (set by ``Engine.encode``; a
            multimodal prompt is a :class:`~swiftcore_infer.media.Prompt` carrying its media tensors), so
            that code outside the engine thread never decodes the request's media again.
        media_policy: a server's :class:`~swiftcore_infer.media.MediaPolicy` for the record's media (remote
            URLs it allowed are fetched when encoding; decoded items held to its limits); None for local callers.
    """

    record: dict[str, Any] | None = None
    prompt: str | list[int] | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    adapter: str | None = None
    request_id: str | None = None
    encoded: list[int] | None = field(default=None, repr=False, compare=False)
    media_policy: Any = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if (self.record is None) == (self.prompt is None):
            raise InvalidRequestError("a request needs exactly one of 'record' (chat) and 'prompt' (completion)")


@dataclass
class Generation:
    """One reply: the text, its parsed parts, token counts and why it stopped.

    A request that failed has ``finish_reason == "error"`` and ``error`` set; the other fields are empty.

    Attributes:
        text: the generated text up to (not including) the stop token or stop string.
        content: the reply with reasoning and tool calls taken out (per template).
        reasoning_content: the thinking block, or None.
        tool_calls: OpenAI-style tool calls parsed from the text (empty list or None when there are none).
        prompt_tokens: tokens in the encoded prompt.
        completion_tokens: generated tokens, the stop token included.
        finish_reason: ``stop``, ``length`` or ``error``.
        token_ids: the generated token ids (without the stop token).
        error: why the request failed.
        error_status: the HTTP status that error maps to (400 for a bad request).
        logprobs: for an RL rollout that asked for them (``Engine.generate_rollouts(..., logprobs=True)``), each
            generated token's log-probability under the distribution it was sampled from, the stop token included
            (one per rollout id); None otherwise.
    """

    text: str
    content: str
    reasoning_content: str | None
    tool_calls: list | None
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # "stop", "length" or "error"
    token_ids: list[int] = field(default_factory=list)
    error: str | None = None
    error_status: int = 0
    logprobs: list[float] | None = None

    @property
    def ok(self) -> bool:
        """False when the request failed."""
        return self.error is None

    @classmethod
    def failed(cls, error: BaseException, prompt_tokens: int = 0) -> Generation:
        """A :class:`Generation` standing for a request that failed with ``error`` (never with an empty message)."""
        status = getattr(error, "status", 400 if isinstance(error, ValueError) else 500)
        return cls(
            text="",
            content="",
            reasoning_content=None,
            tool_calls=None,
            prompt_tokens=prompt_tokens,
            completion_tokens=0,
            finish_reason="error",
            error=error_text(error),
            error_status=status,
        )


@dataclass
class StreamDelta:
    """A piece of a streamed reply: new text, and the full :class:`Generation` on the last piece.

    Attributes:
        text: newly generated text (may be empty when a token completes no character yet).
        token_ids: every token generated since the piece before (those of steps that sent no text included; the
            stop token not), so the pieces' ids put together are the final generation's ``token_ids``.
        final: the finished generation (set on the last delta only).
        logprobs: with the request's ``sampling.logprobs`` set and a backend that reports them while it generates,
            one :class:`TokenLogprob` per id of ``token_ids``: the raw log-probs, as
            :meth:`~swiftcore_infer.Engine.prompt_logprobs` scores them; None otherwise (a backend that does not report
            them while it generates, or a request that did not ask).
    """

    text: str
    token_ids: list[int] = field(default_factory=list)
    final: Generation | None = None
    logprobs: list[TokenLogprob] | None = None


@dataclass(frozen=True)
class TokenLogprob:
    """One token of a scored sequence: its log-probability given the tokens before it, and the most likely tokens
    at its position (what OpenAI's ``logprobs`` / ``top_logprobs`` report).

    Attributes:
        token_id: the token.
        logprob: ``log p(token | previous tokens)``, from the model's raw logits (temperature 1, no top-k or top-p:
            vLLM's default ``raw_logprobs``).
        top: ``(token id, log-probability)`` of the ``top_logprobs`` most likely tokens at this position, most
            likely first (empty when none were asked for).
    """

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()
