"""``POST /v1/chat/completions``: a conversation answered whole, or streamed as server-sent events.

With ``modalities: ["text", "audio"]`` and ``audio: {"voice", "format"}`` the reply is generated as text, as
always, then spoken by the served model's voice (:mod:`swiftcore_serve.voice`, the code ``POST /v1/audio/speech``
runs: the same text and voice give the same samples) and returned as ``choices[0].message.audio``
(``{id, data (base64), expires_at, transcript}``); ``content`` keeps the text too. Streamed, as OpenAI streams it
(``delta.audio``): each content piece is also a ``transcript`` piece (the first with the audio's ``id``), and once
the reply is whole it is spoken and sent in one more chunk, ``{"data", "expires_at"}``, before the finish chunk.

swiftcore's scoring extension: with ``completion_token_ids`` (and ``max_tokens: 0``, ``logprobs: true``) nothing is
generated; the given ids are scored as the assistant's reply after the conversation (its images and audio included)
and their raw log-probs returned in ``choices[0].logprobs.content``, what a distillation trainer asks of a teacher.
``return_token_ids`` also returns the prompt as encoded (``prompt_token_ids``) and the reply's ids
(``choices[0].token_ids``).

Streamed with ``logprobs``, each chunk's ``logprobs.content`` holds the entries of the tokens of its text, the values
the unstreamed reply returns (:mod:`swiftcore_serve.stream_logprobs`: live, as the tokens are generated, from an
engine that reports them while it streams, as the transformers engine; else the chunks after the role's come once the
reply is whole and scored).
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request as HttpRequest
from swiftcore_infer import Request, media_kinds, openai_media_parts, strip_media_values

from swiftcore_serve import replies
from swiftcore_serve import voice as voices
from swiftcore_serve.openapi import documented
from swiftcore_serve.protocol import AUDIO_FORMATS, ChatCompletionRequest, ChatCompletionResponse, sampling_from
from swiftcore_serve.routing import api_router, sse, unless_disconnected
from swiftcore_serve.state import ServeState, StateDep
from swiftcore_serve.stream_logprobs import stream_with_logprobs
from swiftcore_serve.stream_parser import StreamParser, markers_for

__all__ = ["router"]

router = api_router()


@router.post("/v1/chat/completions", response_model=None, responses=documented(ChatCompletionResponse, stream=True))
async def chat(body: ChatCompletionRequest, http: HttpRequest, state: StateDep) -> Any:
    """Answer a chat request (tools, ``chat_template_kwargs``, images and audio for models that take them)."""
    adapter = state.adapter_for(body.model)
    state.require_generation()
    scores_only = body.scores_only()  # completion_token_ids: the given reply scored, nothing generated
    top = body.top_logprobs_wanted()  # None: no logprobs
    config = state.config
    record = body.record()
    spoken = await _voice_for(body, state)  # before generating: a bad voice or format costs no generation
    if media_kinds(record):  # OpenAI's image_url / input_audio parts -> the template's parts (cheap checks)
        record = openai_media_parts(record, state.media_modalities, body.model, config.media)
    state.limits.check_text(strip_media_values(record), "messages")
    if scores_only:  # in the vocabulary; and the context check leaves room for the given reply
        state.limits.check_ids(body.completion_token_ids or (), "completion_token_ids")
        body = body.model_copy(update={"max_tokens": len(body.completion_token_ids or ())})
    request = Request(
        record=record,
        sampling=sampling_from(body, config.default_max_tokens),
        adapter=adapter,
        request_id=f"chatcmpl-{uuid.uuid4().hex}",
        media_policy=config.media,
    )
    await state.encode_media(request)
    if scores_only:
        return await _scored(state, http, body, request, top or 0)
    if body.stream:
        include_usage = bool((body.stream_options or {}).get("include_usage"))
        return await sse(http, _chunks(state, request, body.model, include_usage, spoken, top), state.redact)
    generation = await unless_disconnected(http, state.worker.generate(request))
    replies.raise_failed(generation)
    logprobs = None
    if top is not None:  # scored on the engine's thread, after the reply (the raw log-probs, as vLLM's default)
        engine = state.engine

        def score() -> dict[str, Any]:
            ids, entries = engine.completion_logprobs(request, generation.token_ids, top_logprobs=top)
            return replies.chat_logprobs(engine.tokenizer, ids, entries)

        logprobs = await unless_disconnected(http, state.worker.call(score))
    message = replies.message(generation)
    created = int(time.time())
    if spoken is not None and (generation.content or "").strip():  # a reply of tool calls alone says nothing
        synthesizer, voice, fmt = spoken
        audio = await voices.speak(state, http, synthesizer, generation.content, voice, fmt)
        message["audio"] = {
            "id": f"audio_{uuid.uuid4().hex}",
            "data": base64.b64encode(audio).decode("ascii"),
            "expires_at": created,  # kept nowhere: a later turn sends the text back, not this id
            "transcript": generation.content,
        }
    reply: dict[str, Any] = {
        "id": request.request_id,
        "object": "chat.completion",
        "created": created,
        "model": body.model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": logprobs,
                "finish_reason": replies.finish_reason(generation),
            }
        ],
        "usage": replies.usage(generation),
    }
    if body.return_token_ids:
        reply["prompt_token_ids"] = list(request.encoded or ())
        reply["choices"][0]["token_ids"] = list(generation.token_ids)
    return reply


async def _scored(
    state: ServeState, http: HttpRequest, body: ChatCompletionRequest, request: Request, top: int
) -> dict[str, Any]:
    """The reply of a request that scores ``completion_token_ids`` after the conversation (its images and audio
    included): their raw log-probs in ``logprobs.content``, nothing generated."""
    engine = state.engine
    ids = list(body.completion_token_ids or ())

    def score() -> tuple[list[int], dict[str, Any]]:  # on the engine's thread: it encodes (if not yet) and scores
        scored, entries = engine.completion_logprobs(request, ids, top_logprobs=top)
        return list(request.encoded or ()), replies.chat_logprobs(engine.tokenizer, scored, entries)

    prompt, logprobs = await unless_disconnected(http, state.worker.call(score))
    choice: dict[str, Any] = {
        "index": 0,
        "message": {"role": "assistant", "content": engine.tokenizer.decode(ids, skip_special_tokens=True)},
        "logprobs": logprobs,
        "finish_reason": "length",  # the reply is the given ids, all of them: none was chosen to stop
    }
    reply: dict[str, Any] = {
        "id": request.request_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.model,
        "choices": [choice],
        "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(ids), "total_tokens": len(prompt) + len(ids)},
    }
    if body.return_token_ids:
        reply["prompt_token_ids"] = prompt
        choice["token_ids"] = ids
    return reply


async def _voice_for(body: ChatCompletionRequest, state: ServeState) -> tuple[Any, str, str] | None:
    """``(synthesizer, voice, format)`` of the spoken reply the request asks for, or None for text alone.

    Raises:
        InvalidRequestError: naming the field: the request's own problems (:meth:`ChatCompletionRequest.audio_out`),
            a served model without a voice (``modalities``), or a voice it does not have (``audio.voice``).
    """
    audio = body.audio_out()
    if audio is None:
        return None
    synthesizer = await voices.synthesizer(state)
    if synthesizer is None:
        raise voices.no_voice(body.model, 'modalities ["text", "audio"]', "modalities")
    voice = voices.pick_voice(synthesizer, audio.voice_name(), body.model, "audio.voice")
    return synthesizer, voice, AUDIO_FORMATS[audio.format]


async def _chunks(
    state: ServeState,
    request: Request,
    model: str,
    include_usage: bool,
    spoken: tuple[Any, str, str] | None = None,
    top: int | None = None,
) -> AsyncIterator[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects of a streamed reply: role, then reasoning, content and tool calls; with
    ``spoken`` (:func:`_voice_for`) each content piece is a ``delta.audio.transcript`` piece too, and the audio of
    the whole reply comes in one ``delta.audio`` chunk before the finish chunk.

    With ``top`` (``logprobs``: alternatives per token) each chunk's ``logprobs.content`` holds the entries of the
    tokens that produced its text (:mod:`swiftcore_serve.stream_logprobs`). Text the stream parser holds back
    (a marker that may be starting, the tool calls sent parsed at the end) loses no entries: a piece of the reply
    whose text is all held back is sent as a chunk with an empty delta and its entries (what vLLM sends for such a
    step when it returns token ids), and the entries of the reply's last piece go with the first chunk after it
    (the rest of the text, the tool calls, or the finish chunk)."""
    # OpenAI's stream accumulators concatenate every string and add every number of a delta: the id and
    # expires_at are sent once each, the data in one piece (separately encoded base64 pieces do not concatenate).
    audio_id = f"audio_{uuid.uuid4().hex}"
    said = False  # whether a transcript piece (and so the id) was sent
    engine = state.engine
    pending: list[dict[str, Any]] = []  # logprobs entries not sent yet: they go with the next chunk

    def with_transcript(delta: dict[str, Any]) -> dict[str, Any]:
        nonlocal said
        if spoken is None or not delta.get("content"):
            return delta
        audio = {"transcript": delta["content"]} if said else {"id": audio_id, "transcript": delta["content"]}
        said = True
        return {**delta, "audio": audio}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        logprobs = None
        if pending:  # a chunk whose tokens are all sent before it has none (as the role chunk)
            logprobs = {"content": pending.copy()}
            pending.clear()
        return {
            "id": request.request_id,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}],
        }

    think_start, think_end, tool_start = markers_for(engine.template)
    parser: StreamParser | None = None
    async for item in stream_with_logprobs(state, request, top):
        if item is None:  # the request was accepted
            parser = StreamParser(
                _prompt_opens_thinking(engine, request, think_start),
                think_start,
                think_end,
                tool_start,
                content_start=getattr(engine.template, "content_start", None),
                content_label=getattr(engine.template, "content_label", None),
            )
            yield chunk({"role": "assistant", "content": ""})
            continue
        assert parser is not None
        delta, ids, entries = item
        if entries:
            pending.extend(replies.chat_logprobs(engine.tokenizer, ids, entries)["content"])
        pieces = parser.feed(delta.text)
        for name, text in pieces:
            yield chunk(with_transcript({name: text}))
        if delta.final is None:
            if pending:  # all of this piece's text is held back: its entries go now, with an empty delta
                yield chunk({})
            continue
        for name, text in parser.flush():
            yield chunk(with_transcript({name: text}))
        final = delta.final
        calls = replies.tool_calls(final)
        if calls:
            yield chunk({"tool_calls": [{"index": i, **c} for i, c in enumerate(calls)]})
        if spoken is not None and (final.content or "").strip():  # the reply's text, as unstreamed
            synthesizer, voice, fmt = spoken
            audio = await voices.say(state, synthesizer, final.content, voice, fmt)
            data = {"data": base64.b64encode(audio).decode("ascii"), "expires_at": int(time.time())}
            yield chunk({"audio": data if said else {"id": audio_id, **data}})
        yield chunk({}, replies.finish_reason(final))
        if include_usage:
            yield {
                "id": request.request_id,
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": model,
                "choices": [],
                "usage": replies.usage(final),
            }


def _prompt_opens_thinking(engine: Any, request: Request, think_start: str) -> bool:
    """Whether the prompt ends inside an open thinking block (the reply starts with reasoning): decided on
    the ids the engine encodes (with the checkpoint's defaults), exactly as the non-streamed parse does.
    The engine thread has encoded the request already (its first piece came back): those ids are reused, so
    the event loop never decodes the request's media."""
    try:
        ids = request.encoded if request.encoded is not None else engine.encode(request)
        return engine.prompt_opens_thinking(ids)
    except Exception:  # the request was already encoded; this only guides streaming
        return False
