"""The served model's voice: asked of the plugins once, used by ``POST /v1/audio/speech`` and by chat replies with
``modalities: ["text", "audio"]`` (one code path: the same text and voice give the same samples on both).

The server names no model family: on first use it asks the ``swiftcore_speech_synthesizer`` hook
(:mod:`swiftcore_serve.hookspecs`) for the served checkpoint's voice, on the engine's worker thread, and keeps the
answer (a synthesizer, or None: the model does not speak). Synthesis runs on the worker thread too, queued like any
engine call (a full queue is a 429). Samples come back as 16-bit mono audio: ``wav`` (stdlib ``wave``), ``pcm``
(raw signed 16-bit little-endian, no header), ``flac`` and ``mp3`` (libsndfile through soundfile).
"""

from __future__ import annotations

import io
import wave
from typing import Any
from weakref import WeakKeyDictionary

from starlette.requests import Request as HttpRequest
from swiftcore_infer import InvalidRequestError

from swiftcore_serve.routing import unless_disconnected
from swiftcore_serve.state import ServeState

__all__ = ["MEDIA_TYPES", "encode", "no_voice", "pick_voice", "say", "speak", "synthesizer"]

#: The formats :func:`encode` writes -> their content type.
MEDIA_TYPES = {"wav": "audio/wav", "pcm": "audio/pcm", "flac": "audio/flac", "mp3": "audio/mpeg"}
#: libsndfile's container and encoding for the compressed formats.
_SOUNDFILE = {"flac": ("FLAC", "PCM_16"), "mp3": ("MP3", "MPEG_LAYER_III")}
#: Each served app's synthesizer, once asked for: a 1-tuple (its value may be None: the model does not speak).
_SYNTHESIZERS: WeakKeyDictionary[ServeState, tuple[Any]] = WeakKeyDictionary()


async def synthesizer(state: ServeState) -> Any:
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


def no_voice(model: str, what: str, param: str) -> InvalidRequestError:
    """The 400 for speech asked of a model whose plugins give it no voice (``what``: the route or field asking)."""
    return InvalidRequestError(
        f"model {model!r} does not speak: {what} needs a checkpoint whose plugin gives it a voice "
        "(the swiftcore_speech_synthesizer hook; e.g. Qwen3-Omni with its talker)",
        param=param,
    )


def pick_voice(synth: Any, requested: str, model: str, param: str) -> str:
    """The synthesizer's voice named ``requested`` (case does not matter).

    Raises:
        InvalidRequestError: ``requested`` is not one of them (the message lists them; ``param`` names the field).
    """
    voices = list(synth.voices)
    voice = next((v for v in voices if v.lower() == requested.lower()), None)
    if voice is None:
        raise InvalidRequestError(f"voice {requested!r} is not one of model {model!r}'s voices {voices}", param=param)
    return voice


async def say(state: ServeState, synth: Any, text: str, voice: str, fmt: str) -> bytes:
    """``text`` said by ``synth`` with ``voice`` (from :func:`pick_voice`), encoded as ``fmt`` (a key of
    :data:`MEDIA_TYPES`), on the engine's worker thread (queued with the engine's other jobs)."""

    def run() -> bytes:
        samples, rate = synth.synthesize(text, voice)
        return encode(samples, rate, fmt)

    return await state.worker.call(run)


async def speak(state: ServeState, http: HttpRequest, synth: Any, text: str, voice: str, fmt: str) -> bytes:
    """:func:`say`, given up (its job cancelled) if the client goes away meanwhile."""
    return await unless_disconnected(http, say(state, synth, text, voice, fmt))


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
