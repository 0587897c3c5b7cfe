"""``POST /v1/audio/speech``: OpenAI's text-to-speech API, spoken by a voice a model plugin provides.

The server names no model family: the voice comes from a plugin through :mod:`swiftcore_serve.voice` (asked once,
on the first request that needs it; None: every request is a 400 naming the model), which chat replies with
``modalities: ["text", "audio"]`` use too. ``speed`` other than 1.0, ``instructions`` and ``stream_format: "sse"``
are refused with a 400 naming the field; so are ``opus`` and ``aac``.
"""

from __future__ import annotations

from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request as HttpRequest
from swiftcore_infer import InvalidRequestError

from swiftcore_serve import voice as voices
from swiftcore_serve.openapi import documented
from swiftcore_serve.protocol import MAX_MODEL_NAME, ErrorResponse
from swiftcore_serve.routing import api_router
from swiftcore_serve.state import StateDep

__all__ = ["MAX_INPUT_CHARS", "SpeechRequest", "router"]

router = api_router()

_ROUTE = "/v1/audio/speech"
#: OpenAI's limit on ``input``.
MAX_INPUT_CHARS = 4096
#: ``response_format`` -> the answer's content type.
_FORMATS = voices.MEDIA_TYPES


class SpeechRequest(BaseModel):
    """``POST /v1/audio/speech`` (OpenAI's text-to-speech body)."""

    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False)

    model: str = Field(max_length=MAX_MODEL_NAME)
    input: str = Field(max_length=MAX_INPUT_CHARS, description="The text to say (not empty).")
    voice: str = Field(max_length=64, description="One of the model's voices (the 400 for another lists them).")
    response_format: str = Field("mp3", max_length=16, description="wav, pcm (s16le, no header), flac or mp3.")
    speed: float | None = Field(None, ge=0.25, le=4.0, description="Only 1.0: other speeds are refused.")
    instructions: str | None = Field(None, max_length=MAX_INPUT_CHARS, description="Refused: not supported.")
    stream_format: str | None = Field(None, max_length=16, description="audio (the default); sse is refused.")


_AUDIO = {"schema": {"type": "string", "format": "binary"}}
_RESPONSES = {
    **documented(ErrorResponse),
    200: {"description": "The audio, 16-bit mono", "content": {kind: _AUDIO for kind in _FORMATS.values()}},
}


@router.post(_ROUTE, response_class=Response, responses=_RESPONSES)
async def speech(body: SpeechRequest, http: HttpRequest, state: StateDep) -> Response:
    """Say ``input`` with the served model's voice ``voice``, in ``response_format``."""
    if state.adapter_for(body.model) is not None:
        raise InvalidRequestError(
            f"model {body.model!r} is a LoRA adapter; speech is spoken by the served checkpoint itself: "
            f"use model={state.config.model_name!r}",
            param="model",
        )
    _check(body)
    synthesizer = await voices.synthesizer(state)
    if synthesizer is None:
        raise voices.no_voice(body.model, _ROUTE, "model")
    voice = voices.pick_voice(synthesizer, body.voice, body.model, "voice")
    audio = await voices.speak(state, http, synthesizer, body.input, voice, body.response_format)
    return Response(content=audio, media_type=_FORMATS[body.response_format])


def _check(body: SpeechRequest) -> None:
    """Refuse what this server cannot do, naming the field (before any model is loaded)."""
    if not body.input.strip():
        raise InvalidRequestError("input is empty: give the text to say", param="input")
    if body.response_format not in _FORMATS:
        raise InvalidRequestError(
            f"response_format {body.response_format!r} is not supported; use one of {', '.join(_FORMATS)}",
            param="response_format",
        )
    if body.speed is not None and body.speed != 1.0:
        raise InvalidRequestError(f"speed {body.speed} is not supported: only 1.0 (leave it out)", param="speed")
    if body.instructions:
        raise InvalidRequestError("instructions are not supported: the voice is the model's own", param="instructions")
    if body.stream_format not in (None, "audio"):
        raise InvalidRequestError(
            f"stream_format {body.stream_format!r} is not supported; the audio comes whole (audio)",
            param="stream_format",
        )
