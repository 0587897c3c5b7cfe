"""The OpenAI request bodies the server accepts (pydantic), and their translation into engine requests.

Unknown fields are ignored, as OpenAI-compatible servers do, so newer clients keep working; fields that
are present are type-checked by pydantic and range-checked by :class:`~swiftcore_infer.types.SamplingParams`,
so a bad value is a 400 naming the field, never a crash. Floats must be finite, seeds fit 64 bits and names
and lists have sane bounds, so no value can reach the engine in a shape it would crash on.

The response models at the end are for the OpenAPI schema only (the routes build plain dicts): they document
what each route answers, and the property-based fuzz test checks every answer against them.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from swiftcore_infer import MAX_TOP_LOGPROBS, InvalidRequestError, SamplingParams

__all__ = [
    "AUDIO_FORMATS",
    "ChatAudioOut",
    "ChatCompletionRequest",
    "ChatCompletionResponse",
    "ClassifyRequest",
    "ClassifyResponse",
    "CompletionRequest",
    "CompletionResponse",
    "EmbeddingRequest",
    "EmbeddingResponse",
    "ErrorResponse",
    "HealthResponse",
    "ModelList",
    "RerankRequest",
    "RerankResponse",
    "sampling_from",
]

#: The longest model name a request may give (names are echoed in errors; a megabyte name should not be).
MAX_MODEL_NAME = 256
#: The most stop strings a request may give (every generated token is checked against each one).
MAX_STOPS = 16
_INT64 = 2**63
#: Temperatures below this sample greedily (as vLLM does): dividing logits by 1e-300 overflows to inf and
#: the sampler fails on NaN probabilities.
_MIN_TEMPERATURE = 1e-5


def _integral(value: Any) -> Any:
    """``5.0`` -> ``5``: JSON Schema counts an integral float as an integer, so the server takes it as one."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


#: An integer field: strict (no "5", no true), but 5.0 is 5.
Int = Annotated[int, BeforeValidator(_integral)]
#: A token id (the vocabulary's size is checked by the server, which knows it).
TokenId = Annotated[int, Field(ge=0), BeforeValidator(_integral)]
#: A string that must not be empty (a prompt, an input, a stop string).
Text = Annotated[str, Field(min_length=1)]
#: Text or token ids, one or several, none of them empty: a completion prompt or an embedding input.
TextOrIds = (
    Text
    | Annotated[list[Text], Field(min_length=1)]
    | Annotated[list[TokenId], Field(min_length=1)]
    | Annotated[list[Annotated[list[TokenId], Field(min_length=1)]], Field(min_length=1)]
)


# Bounds sit inside each type, before the validator, so the schema states them as minimum/maximum (a Field
# bound on ``Int | None``, or one after a validator, reaches the JSON schema as a raw, meaningless ``ge`` key).
#: An integer >= 1 (max_tokens, dimensions, top_n).
PositiveInt = Annotated[int, Field(ge=1), BeforeValidator(_integral)]
#: An integer >= 0 (top_k).
NonNegativeInt = Annotated[int, Field(ge=0), BeforeValidator(_integral)]
#: How many alternatives to report per token (``logprobs`` of a completion, ``top_logprobs`` of a chat).
TopLogprobs = Annotated[int, Field(ge=0, le=MAX_TOP_LOGPROBS), BeforeValidator(_integral)]
#: A seed: a signed 64-bit integer (torch, vLLM and SGLang all take one).
Seed = Annotated[int, Field(ge=-_INT64, lt=_INT64), BeforeValidator(_integral)]
#: The ranges SamplingParams enforces, stated in the schema too so clients (and the fuzzer) see them.
Temperature = Annotated[float, Field(ge=0, le=100)]
TopP = Annotated[float, Field(gt=0, le=1)]
#: Bounded: a penalty of 1e-48 divides logits into infinities, and the sampler crashes on NaN.
Penalty = Annotated[float, Field(ge=0.01, le=100)]


#: Every request body: unknown fields ignored; types strict, as OpenAI's own API ("5" is no integer, 1 no
#: boolean), so what the schema calls invalid is refused; NaN and infinities refused (JSON has neither, but
#: the float fields must not take them from a lenient parser, nor overflow to them from 1e400).
_REQUEST_CONFIG = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False)


def _same(value: Any, allowed: Any) -> bool:
    """JSON equality: 1.0 is 1, but true is not 1 and false is not 0."""
    if isinstance(value, bool) or isinstance(allowed, bool):
        return type(value) is type(allowed) and value == allowed
    return bool(value == allowed)


def _refused(why: str, *allowed: Any) -> Any:
    """A field of OpenAI's API this server does not implement: only ``allowed`` values (the first is the default)
    pass, in the schema as at run time (:meth:`_Body.refuse_unsupported`, whose 400 names the field and says
    ``why``); any other is refused rather than ignored, so a client never takes a silently dropped option for
    an honoured one."""
    return Field(default=allowed[0], description=f"Not supported: {why}", json_schema_extra={"enum": list(allowed)})


class _Body(BaseModel):
    model_config = _REQUEST_CONFIG
    #: The fields this server refuses unless they ask for nothing (each is a :func:`_refused`).
    UNSUPPORTED: ClassVar[tuple[str, ...]] = ()

    model: str = Field(max_length=MAX_MODEL_NAME)
    max_tokens: PositiveInt | None = None
    max_completion_tokens: PositiveInt | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_k: NonNegativeInt | None = None
    seed: Seed | None = None
    stop: Text | Annotated[list[Text], Field(max_length=MAX_STOPS)] | None = None
    # Only 1; checked in sampling_from, whose message says what to do instead.
    n: Int = Field(default=1, json_schema_extra={"enum": [1]})
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    repetition_penalty: Penalty | None = None

    def refuse_unsupported(self) -> None:
        """Refuse a field of :attr:`UNSUPPORTED` set to anything but its allowed values.

        Raises:
            InvalidRequestError: naming the first such field and what to do instead.
        """
        for name in self.UNSUPPORTED:
            field = type(self).model_fields[name]
            value = getattr(self, name)
            if not any(_same(value, a) for a in field.json_schema_extra["enum"]):  # type: ignore[index]
                why = (field.description or "").removeprefix("Not supported: ")
                raise InvalidRequestError(f"{name}={value!r} is not supported: {why}", param=name)


class ChatMessageIn(BaseModel):
    """One message of a conversation: ``role`` and ``content``, plus whatever else the template reads
    (``tool_calls``, ``tool_call_id``, ``name``, ``reasoning_content``) passed through as given.

    Typed here so the schema (and the fuzz test that follows it) knows a message's shape; the template
    still judges the conversation (a role it does not know, a user turn without content).
    """

    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)

    role: str
    content: str | list[dict[str, Any]] | None = None


#: OpenAI's chat ``audio.format`` values this server writes -> the :mod:`swiftcore_serve.voice` format (OpenAI's
#: ``pcm16`` is raw 16-bit little-endian samples, the speech route's ``pcm``); ``aac`` and ``opus`` are refused.
AUDIO_FORMATS = {"wav": "wav", "mp3": "mp3", "flac": "flac", "pcm16": "pcm"}
#: The output modalities a chat request may ask for.
MODALITIES = ("text", "audio")


class VoiceRef(BaseModel):
    """A voice given as an object (OpenAI's custom voice ``{"id": ...}``): the id names one of the model's voices."""

    model_config = _REQUEST_CONFIG

    id: str = Field(max_length=64)


class ChatAudioOut(BaseModel):
    """``audio`` of a chat request with ``modalities: ["text", "audio"]``: the reply spoken with ``voice``."""

    model_config = _REQUEST_CONFIG

    voice: Annotated[str, Field(max_length=64)] | VoiceRef = Field(
        description="One of the model's voices (the 400 for another lists them)."
    )
    format: str = Field(
        max_length=16,
        description="wav (24 kHz mono 16-bit), mp3, flac or pcm16 (raw s16le); aac and opus are refused.",
        json_schema_extra={"enum": list(AUDIO_FORMATS)},
    )

    def voice_name(self) -> str:
        """The voice asked for, given as a name or as ``{"id": name}``."""
        return self.voice if isinstance(self.voice, str) else self.voice.id


class ChatCompletionRequest(_Body):
    """``POST /v1/chat/completions``."""

    messages: list[ChatMessageIn] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    chat_template_kwargs: dict[str, Any] | None = None
    logprobs: bool | None = Field(default=None, description="Return each generated token's log-probability.")
    top_logprobs: TopLogprobs | None = Field(
        default=None, description="With logprobs: also the this many most likely tokens at each position."
    )
    response_format: Any = _refused(
        "this server does not constrain the output to JSON; remove it, or send {'type': 'text'}", None, {"type": "text"}
    )
    modalities: (
        Annotated[
            list[Annotated[str, Field(max_length=16, json_schema_extra={"enum": list(MODALITIES)})]],
            Field(min_length=1, max_length=len(MODALITIES)),
        ]
        | None
    ) = Field(default=None, description='["text"] (the default), or ["text", "audio"] for a spoken reply too.')
    audio: ChatAudioOut | None = Field(default=None, description='With modalities ["text", "audio"]: the voice.')
    # 0 only with completion_token_ids: the given reply scored, nothing generated (a distillation teacher's request).
    max_tokens: NonNegativeInt | None = None
    completion_token_ids: Annotated[list[TokenId], Field(min_length=1)] | None = Field(
        default=None,
        description="swiftcore's extension: score these token ids as the assistant's reply to the conversation "
        "(with max_tokens: 0 and logprobs: true) instead of generating one; logprobs.content holds theirs.",
    )
    return_token_ids: bool = Field(
        default=False,
        description="Also return the prompt's token ids (prompt_token_ids) and the reply's (choices[0].token_ids).",
    )
    UNSUPPORTED = ("response_format",)

    def scores_only(self) -> bool:
        """True with ``completion_token_ids``: the given reply is scored after the conversation, nothing generated.

        Raises:
            InvalidRequestError: naming the field: ``max_tokens: 0`` without ``completion_token_ids``;
                ``completion_token_ids`` without ``max_tokens: 0`` or ``logprobs: true``, with
                ``max_completion_tokens``, ``stream`` or the ``audio`` modality.
        """
        if self.completion_token_ids is None:
            if self.max_tokens == 0:
                raise InvalidRequestError(
                    "max_tokens=0 generates nothing: send completion_token_ids to score a "
                    "given reply, or max_tokens >= 1 to generate one",
                    param="max_tokens",
                )
            return False
        if self.max_tokens != 0:
            raise InvalidRequestError(
                "completion_token_ids scores the given reply and generates nothing: send max_tokens: 0",
                param="max_tokens",
            )
        if self.max_completion_tokens is not None:
            raise InvalidRequestError(
                "completion_token_ids generates nothing: leave max_completion_tokens out (send max_tokens: 0)",
                param="max_completion_tokens",
            )
        if not self.logprobs:
            raise InvalidRequestError(
                "completion_token_ids needs logprobs: true (the scores are the reply)", param="logprobs"
            )
        if self.stream:
            raise InvalidRequestError("completion_token_ids is not streamed; send stream: false", param="stream")
        if "audio" in (self.modalities or ()):  # nothing is generated, so there is no reply to speak
            raise InvalidRequestError(
                "completion_token_ids scores a given reply and speaks nothing: send "
                'modalities ["text"] or leave modalities and audio out',
                param="modalities",
            )
        return True

    def audio_out(self) -> ChatAudioOut | None:
        """The spoken reply asked for (None: text only).

        Raises:
            InvalidRequestError: naming the field: an unknown modality, ``audio`` modality without ``audio`` (or
                ``audio`` without that modality: it would be ignored), or an unsupported format.
        """
        wanted = self.modalities or ["text"]
        unknown = [m for m in wanted if m not in MODALITIES]
        if unknown:
            raise InvalidRequestError(
                f"modalities {unknown} unknown: use 'text', or 'text' and 'audio' for a spoken reply too",
                param="modalities",
            )
        if "audio" not in wanted:
            if self.audio is not None:  # refused rather than ignored: the client expects audio it would not get
                raise InvalidRequestError(
                    'audio is set but modalities does not ask for audio: send modalities ["text", "audio"] '
                    "for a spoken reply, or leave audio out",
                    param="audio",
                )
            return None
        if self.audio is None:
            raise InvalidRequestError(
                'modalities ["text", "audio"] needs audio: {"voice": ..., "format": "wav"} (the voice and format '
                "of the spoken reply)",
                param="audio",
            )
        if self.audio.format not in AUDIO_FORMATS:
            raise InvalidRequestError(
                f"audio.format {self.audio.format!r} is not supported; use one of {', '.join(AUDIO_FORMATS)}",
                param="audio.format",
            )
        return self.audio

    def top_logprobs_wanted(self) -> int | None:
        """None without ``logprobs``; else how many alternatives per token (``top_logprobs``, default 0).

        Raises:
            InvalidRequestError: ``top_logprobs`` without ``logprobs: true`` (as OpenAI and vLLM).
        """
        if not self.logprobs:
            if self.top_logprobs is not None:
                raise InvalidRequestError("top_logprobs needs logprobs: true", param="top_logprobs")
            return None
        return self.top_logprobs or 0

    def record(self) -> dict[str, Any]:
        """The swiftcore chat record (what the template encodes)."""
        if self.tool_choice not in (None, "auto", "none"):
            raise InvalidRequestError(
                "tool_choice supports 'auto' and 'none' only (the model decides)", param="tool_choice"
            )
        # Only what the client sent: a missing content stays missing (the template tells it from null).
        record: dict[str, Any] = {"messages": [_without_audio(m.model_dump(exclude_unset=True)) for m in self.messages]}
        if self.tools and self.tool_choice != "none":
            record["tools"] = self.tools
        if self.chat_template_kwargs:
            record["chat_template_kwargs"] = self.chat_template_kwargs
        return record


def _without_audio(message: dict[str, Any]) -> dict[str, Any]:
    """An earlier spoken reply sent back (``audio: {id, data, transcript, ...}`` on an assistant turn) as its text:
    the server keeps no audio to refer to, and a template would not read the base64 data; the text is the
    message's ``content``, else the audio's ``transcript``."""
    audio = message.get("audio")
    if message.get("role") != "assistant" or not isinstance(audio, dict):
        return message
    out = {k: v for k, v in message.items() if k != "audio"}
    if out.get("content") is None and isinstance(audio.get("transcript"), str):
        out["content"] = audio["transcript"]
    return out


class CompletionRequest(_Body):
    """``POST /v1/completions`` (raw prompts, no template)."""

    prompt: TextOrIds
    # 0 only with echo: the prompt scored, nothing generated (what a distillation trainer asks of a teacher).
    max_tokens: NonNegativeInt | None = None
    echo: bool = Field(default=False, description="Return the prompt before the completion (and its log-probs).")
    logprobs: TopLogprobs | None = Field(
        default=None,
        description="Return each token's log-probability and the this many most likely tokens at each position.",
    )
    best_of: Any = _refused("this server generates one completion per prompt; send best_of=1 or leave it out", None, 1)
    suffix: Any = _refused("this server does not fill in the middle; put the whole text in prompt", None)
    UNSUPPORTED = ("best_of", "suffix")

    def scores_only(self) -> bool:
        """True for ``max_tokens: 0`` (with ``echo``): the prompt is scored, nothing is generated.

        Raises:
            InvalidRequestError: ``max_tokens: 0`` without ``echo``, or ``echo`` with ``stream``.
        """
        if self.stream and self.echo:  # the prompt is not streamed back (nor scored) while the completion streams
            raise InvalidRequestError("echo is not supported when streaming; send stream: false", param="echo")
        if self.max_tokens == 0:
            if not self.echo:
                raise InvalidRequestError("max_tokens=0 generates nothing: send echo: true to score the prompt",
                                          param="max_tokens")  # fmt: skip
            return True
        return False

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

    model_config = _REQUEST_CONFIG

    model: str = Field(max_length=MAX_MODEL_NAME)
    input: TextOrIds
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: PositiveInt | None = None

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

    model_config = _REQUEST_CONFIG

    model: str = Field(max_length=MAX_MODEL_NAME)
    query: str
    documents: list[str | dict[str, Any]] = Field(min_length=1)
    top_n: PositiveInt | None = None
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

    model_config = _REQUEST_CONFIG

    model: str = Field(max_length=MAX_MODEL_NAME)
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
        InvalidRequestError: a value is out of range, ``n`` is not 1, or a field the server does not implement
            (``best_of``, ``suffix`` ...: ``UNSUPPORTED``) is set.
    """
    body.refuse_unsupported()
    if body.n != 1:
        raise InvalidRequestError(f"n={body.n} is not supported; send n=1 (or several requests)", param="n")
    stop = body.stop
    stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
    max_tokens = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    if max_tokens == 0:  # a completion that only scores its prompt: the checks run with room for one token
        max_tokens = 1
    temperature = 1.0 if body.temperature is None else body.temperature
    return SamplingParams(
        max_new_tokens=default_max_tokens if max_tokens is None else max_tokens,
        temperature=temperature if temperature >= _MIN_TEMPERATURE else 0.0,  # a vanishing one is greedy
        top_p=1.0 if body.top_p is None else body.top_p,
        top_k=body.top_k or 0,
        seed=body.seed,
        stop=stops,
        repetition_penalty=1.0 if body.repetition_penalty is None else body.repetition_penalty,
    )


# ------------------------------------------------------------------------------ responses (OpenAPI only)


class ErrorDetail(BaseModel):
    """OpenAI's error object."""

    message: str
    type: str
    param: str | None
    code: str | None


class ErrorResponse(BaseModel):
    """Every error, whatever its status: ``{"error": {"message", "type", "param", "code"}}``."""

    error: ErrorDetail


class TranscriptionResponse(BaseModel):
    """``POST /v1/audio/transcriptions`` with ``response_format`` json (``text`` only) or verbose_json."""

    text: str
    task: Literal["transcribe"] | None = None
    language: str | None = None
    duration: float | None = None


class HealthResponse(BaseModel):
    """``GET /health``: ``status`` only, unless the caller sent the API key (or the server has none)."""

    status: Literal["ok"]
    backend: str | None = None
    model: str | None = None
    queued: int | None = None


class ModelCard(BaseModel):
    """One served model: its name, never a path on the server."""

    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    root: str
    parent: str | None


class ModelList(BaseModel):
    """``GET /v1/models``."""

    object: Literal["list"]
    data: list[ModelCard]


class Usage(BaseModel):
    """Token counts."""

    prompt_tokens: int
    completion_tokens: int = 0
    total_tokens: int


class ChatAudio(BaseModel):
    """The spoken reply of a chat request with ``modalities: ["text", "audio"]``."""

    id: str
    data: str = Field(description="The audio, base64, in the format the request asked for.")
    expires_at: int = Field(description="Now: the server keeps no audio for later turns to refer to.")
    transcript: str = Field(description="The text spoken (the message's content).")


class ChatMessage(BaseModel):
    """The assistant's reply."""

    role: Literal["assistant"]
    content: str | None
    reasoning_content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    audio: ChatAudio | None = None


class TopLogprob(BaseModel):
    """One of the most likely tokens at a position (chat ``top_logprobs``)."""

    token: str
    logprob: float
    bytes: list[int] | None


class ChatTokenLogprob(TopLogprob):
    """One generated token of a chat reply, with its alternatives."""

    top_logprobs: list[TopLogprob]


class ChatLogprobs(BaseModel):
    """A chat reply's ``logprobs``: one entry per generated token."""

    content: list[ChatTokenLogprob] | None


class ChatChoice(BaseModel):
    """One reply (always one: ``n`` is 1)."""

    index: int
    message: ChatMessage
    logprobs: ChatLogprobs | None
    finish_reason: str
    token_ids: list[int] | None = Field(default=None, description="With return_token_ids: the reply's token ids.")


class ChatCompletionResponse(BaseModel):
    """``POST /v1/chat/completions`` without ``stream`` (a stream is ``text/event-stream`` of chunks)."""

    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    prompt_token_ids: list[int] | None = Field(
        default=None, description="With return_token_ids: the prompt's token ids, as the server encoded it."
    )


class CompletionLogprobs(BaseModel):
    """OpenAI's legacy ``logprobs`` of a completion: per token (the prompt's first with ``echo``) its text, its
    log-probability (None for the prompt's first token), the most likely tokens there, and its offset in ``text``."""

    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]


class CompletionChoice(BaseModel):
    """One prompt's completion."""

    index: int
    text: str
    logprobs: CompletionLogprobs | None
    finish_reason: str


class CompletionResponse(BaseModel):
    """``POST /v1/completions`` without ``stream``."""

    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage


class EmbeddingData(BaseModel):
    """One input's embedding: floats, or base64 of little-endian float32."""

    object: Literal["embedding"]
    index: int
    embedding: list[float] | str


class EmbeddingResponse(BaseModel):
    """``POST /v1/embeddings``."""

    object: Literal["list"]
    model: str
    data: list[EmbeddingData]
    usage: Usage


class RerankResult(BaseModel):
    """One document's relevance."""

    index: int
    relevance_score: float
    document: dict[str, str] | None = None


class RerankResponse(BaseModel):
    """``POST /v1/rerank``."""

    id: str
    model: str
    results: list[RerankResult]
    usage: Usage


class ClassifyResponse(BaseModel):
    """``POST /v1/classify``: one result per input (label and probabilities, labels, or a value)."""

    id: str
    object: Literal["list"]
    created: int
    model: str
    data: list[dict[str, Any]]
    usage: Usage
