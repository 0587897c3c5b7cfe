"""The hook swiftcore-serve declares: a model plugin gives ``swiftcore deploy`` a voice for ``POST /v1/audio/speech``
and for chat replies with ``modalities: ["text", "audio"]``.

Declared through the core's ``swiftcore_addhooks`` (:mod:`swiftcore_serve.plugin`), in swiftcore's pluggy project, so a
plugin implements it with ``@swiftcore.api.hookimpl(optionalhook=True)`` in its plugin module (optional: the plugin
still loads where swiftcore-serve is not installed). The server never names the plugin: it asks the hook, once, on
the first request that needs a voice (:mod:`swiftcore_serve.voice`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from swiftcore.api import hookspec

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = ["SpeechSynthesizer", "swiftcore_speech_synthesizer"]


class SpeechSynthesizer(Protocol):
    """What :func:`swiftcore_speech_synthesizer` returns: a model's voice(s), text in, 16-bit mono samples out."""

    #: The voices a request may name (``voice``); the first is the default.
    voices: Sequence[str]

    def synthesize(self, text: str, voice: str | None = None) -> tuple[Any, int]:
        """Speak ``text`` with ``voice``: ``(samples, sample_rate)``, samples a 1-D int16 numpy array (mono).

        Called on the engine's worker thread, one request at a time; deterministic for a given text and voice.
        """
        ...


@hookspec(firstresult=True)
def swiftcore_speech_synthesizer(model_dir: str, model_type: str | None, plugins: PluginSet) -> Any | None:
    """Return a :class:`SpeechSynthesizer` for the served checkpoint, or None when it is not yours or cannot speak.

    Called by ``swiftcore deploy`` once, on the first ``POST /v1/audio/speech`` or chat request with ``modalities:
    ["text", "audio"]``, on the engine's worker thread (an implementation may load weights: the engine waits
    meanwhile); stops at the first non-None result. None from every plugin makes such requests 400s naming the
    model. E.g. swiftcore-plugin-qwen3-omni answers for a
    Qwen3-Omni checkpoint with its talker.

    :param model_dir: the served base checkpoint directory (a Hugging Face checkpoint).
    :param model_type: the name of the engine's model spec (e.g. ``qwen3_omni_moe``), or None if it has none.
    :param plugins: the loaded plugin set.

    .. versionadded:: 0.1
    """
