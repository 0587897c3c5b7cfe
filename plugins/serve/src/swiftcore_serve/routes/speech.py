"""``POST /v1/audio/speech``: OpenAI's text-to-speech API, spoken by a voice a model plugin provides.

The server names no model family: on the first request it asks the ``swiftcore_speech_synthesizer`` hook
(:mod:`swiftcore_serve.hookspecs`) for the served checkpoint's voice, on the engine's worker thread, and keeps the
answer (a synthesizer, or None: then every request is a 400 naming the model). Synthesis runs on the worker thread
too, queued like any engine call (a full queue is a 429). The samples come back as 16-bit mono audio: ``wav``
(stdlib ``wave``), ``pcm`` (raw signed 16-bit little-endian, no header), ``flac`` and ``mp3`` (libsndfile through
soundfile). ``speed`` other than 1.0, ``instructions`` and ``stream_format: "sse"`` are refused with a 400 naming
the field; so are ``opus`` and ``aac``.
"""

from __future__ import annotations

import io
import wave
from typing import Any
from weakref import WeakKeyDictionary

from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request as HttpRequest
from swiftcore_infer import InvalidRequestError

from swiftcore_serve.openapi import documented
from swiftcore_serve.protocol import MAX_MODEL_NAME, ErrorResponse
from swiftcore_serve.routing import api_router, unless_disconnected
from swiftcore_serve.state import ServeState, StateDep

__all__ = ["MAX_INPUT_CHARS", "SpeechRequest", "router"]

router = api_router()

_ROUTE = "/v1/audio/speech"
#: OpenAI's limit on ``input``.
MAX_INPUT_CHARS = 4096
#: ``response_format`` -> the answer's content type.
_FORMATS = {"wav": "audio/wav", "pcm": "audio/pcm", "flac": "audio/flac", "mp3": "audio/mpeg"}
#: libsndfile's container and encoding for the compressed formats.
_SOUNDFILE = {"flac": ("FLAC", "PCM_16"), "mp3": ("MP3", "MPEG_LAYER_III")}
#: Each served app's synthesizer, once asked for: a 1-tuple (its value may be None: the model does not speak).
_SYNTHESIZERS: WeakKeyDictionary[ServeState, tuple[Any]] = WeakKeyDictionary()


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
    synthesizer = await _synthesizer(state)
    if synthesizer is None:
        raise InvalidRequestError(
            f"model {body.model!r} does not speak: {_ROUTE} needs a checkpoint whose plugin gives it a voice "
            "(the swiftcore_speech_synthesizer hook; e.g. Qwen3-Omni with its talker)",
            param="model",
        )
    voices = list(synthesizer.voices)
    voice = next((v for v in voices if v.lower() == body.voice.lower()), None)
    if voice is None:
        raise InvalidRequestError(f"voice {body.voice!r} is not one of model {body.model!r}'s voices {voices}",
                                  param="voice")  # fmt: skip
    fmt = body.response_format

    def run() -> bytes:
        samples, rate = synthesizer.synthesize(body.input, voice)
        return encode(samples, rate, fmt)

    audio = await unless_disconnected(http, state.worker.call(run))
    return Response(content=audio, media_type=_FORMATS[fmt])


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


async def _synthesizer(state: ServeState) -> Any:
    """The served model's synthesizer (None: it does not speak), asked of the plugins once, on the worker thread."""
    if state not in _SYNTHESIZERS:

        def ask() -> tuple[Any]:
            if state not in _SYNTHESIZERS:  # jobs run one at a time: the first one asks, the others read its answer
                _SYNTHESIZERS[state] = (_ask_plugins(state.engine),)
            return _SYNTHESIZERS[state]

        return (await state.worker.call(ask))[0]
    return _SYNTHESIZERS[state][0]


def _ask_plugins(engine: Any) -> Any:
    """The first synthesizer a plugin gives for ``engine``'s checkpoint, or None."""
    from swiftcore.api import load_plugins

    base_dir = getattr(engine, "base_dir", None)
    if base_dir is None:  # an engine without a local checkpoint directory
        return None
    plugins = load_plugins()  # the run's set: `swiftcore deploy` exports it to SWIFTCORE_PLUGINS
    hook = getattr(plugins.pm.hook, "swiftcore_speech_synthesizer", None)
    if hook is None:
        return None
    spec = getattr(engine, "spec", None)
    return hook(model_dir=str(base_dir), model_type=getattr(spec, "name", None), plugins=plugins)


def encode(samples: Any, sample_rate: int, response_format: str) -> bytes:
    """16-bit mono ``samples`` (an int16 array) as ``response_format``: wav, pcm, flac or mp3."""
    import numpy as np

    pcm = np.asarray(samples, dtype="<i2").reshape(-1)
    if response_format == "pcm":
        return pcm.tobytes()
    buffer = io.BytesIO()
    if response_format == "wav":
        with wave.open(buffer, "wb") as out:
            out.setnchannels(1)
            out.setsampwidth(2)
            out.setframerate(sample_rate)
            out.writeframes(pcm.tobytes())
        return buffer.getvalue()
    import soundfile

    container, subtype = _SOUNDFILE[response_format]
    soundfile.write(buffer, pcm, sample_rate, format=container, subtype=subtype)
    return buffer.getvalue()
