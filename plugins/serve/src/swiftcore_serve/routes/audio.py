"""``POST /v1/audio/transcriptions``: OpenAI's audio API, answered by a speech model as a chat turn."""

from __future__ import annotations

import io
import uuid
import wave
from typing import Any

from fastapi import File, Form
from fastapi.responses import PlainTextResponse
from starlette.requests import Request as HttpRequest
from swiftcore_infer import InvalidRequestError, Request, SamplingParams

from swiftcore_serve import replies
from swiftcore_serve.openapi import documented
from swiftcore_serve.protocol import TranscriptionResponse
from swiftcore_serve.routing import api_router, unless_disconnected
from swiftcore_serve.state import StateDep

__all__ = ["router"]

router = api_router()

_FORMATS = ("json", "text", "verbose_json")
#: How the media decoder names the clip (the chat route's part it builds); this endpoint has the field ``file``.
_CHAT_PART = "messages[0].content[0] (file)"


@router.post("/v1/audio/transcriptions", response_model=None, responses=documented(TranscriptionResponse))
async def transcriptions(
    http: HttpRequest,
    state: StateDep,
    # bytes, not UploadFile: the body is capped by the guard (--max-body-mb) before it is read.
    file: bytes = File(..., description="The audio: WAV (any PCM), MP3 or FLAC."),
    model: str = Form(...),
    response_format: str = Form("json", description="json, text or verbose_json"),
    temperature: float = Form(0.0, ge=0, le=2),
    language: str | None = Form(None, description="Echoed in verbose_json; the model detects the language."),
    prompt: str | None = Form(None, description="Text sent with the audio (ASR templates may ignore it)."),
) -> Any:
    """Transcribe an uploaded clip with a model that takes audio.

    The clip becomes one user turn with an audio part, answered like a chat request (the template's reply format,
    e.g. Qwen3-ASR's ``language X<asr_text>...``, parsed to the transcript).
    """
    adapter = state.adapter_for(model)
    state.require_generation()
    if "audio" not in state.media_modalities:
        raise InvalidRequestError(
            f"model {model!r} does not accept audio; /v1/audio/transcriptions needs a speech model", param="model"
        )
    if response_format not in _FORMATS:
        raise InvalidRequestError(
            f"response_format {response_format!r} is not supported; use json, text or verbose_json",
            param="response_format",
        )
    policy = state.config.media
    data = file
    if len(data) > policy.max_item_bytes:
        raise policy.over("bytes per item", f"file: more than {policy.max_item_bytes} bytes",
                          str(policy.max_item_bytes), "--max-media-mb")  # fmt: skip
    if not data:
        raise InvalidRequestError("file: the upload is empty; send the audio file", param="file")
    content: list[dict[str, Any]] = [{"type": "audio", "audio": data, "_from": "file"}]
    if prompt:
        content.append({"type": "text", "text": prompt})
    request = Request(
        record={"messages": [{"role": "user", "content": content}]},
        sampling=SamplingParams(max_new_tokens=state.config.default_max_tokens, temperature=temperature),
        adapter=adapter,
        request_id=f"transcription-{uuid.uuid4().hex}",
        media_policy=policy,
    )
    try:
        await state.encode_media(request)
    except InvalidRequestError as exc:  # the clip is decoded as a chat part; name this endpoint's field instead
        raise InvalidRequestError(str(exc).replace(_CHAT_PART, "file"), param="file") from None
    generation = await unless_disconnected(http, state.worker.generate(request))
    replies.raise_failed(generation)
    text = (replies.message(generation).get("content") or "").strip()
    if response_format == "text":
        return PlainTextResponse(text)
    if response_format == "verbose_json":
        return {"text": text, "task": "transcribe", "language": language, "duration": _seconds(data)}
    return {"text": text}


def _seconds(data: bytes) -> float | None:
    """A WAV clip's length in seconds (None for other formats: verbose_json then leaves it out)."""
    try:
        with wave.open(io.BytesIO(data)) as clip:
            return round(clip.getnframes() / clip.getframerate(), 3)
    except (wave.Error, EOFError, ZeroDivisionError):
        return None
