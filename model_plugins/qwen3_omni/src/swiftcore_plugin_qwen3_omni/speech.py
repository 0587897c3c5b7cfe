"""Speech out: text -> thinker -> talker codes -> Code2Wav -> 16-bit mono 24 kHz audio.

:func:`speak` runs upstream's ``Qwen3OmniMoeForConditionalGeneration.generate`` (thinker reply, talker codes,
Code2Wav) greedily, and reads the codes Code2Wav decoded with a forward pre-hook, so the caller gets both. Frames
are capped at :data:`MAX_FRAMES` (one Code2Wav chunk of upstream's ``chunked_decode``): the audio is bounded and the
codes seen are exactly the ones decoded. :func:`codes_to_wav` decodes given codes alone (same codes, same samples).

:func:`say` speaks a given text verbatim (text to speech): the same ``generate`` with the thinker's reply forced to
the text, token by token, so the talker gets exactly the input it gets for a reply of that text (a text-only talker
input holds the thinker's input embeddings, not its later layers). :class:`Synthesizer` wraps it for the server's
``POST /v1/audio/speech`` (the ``swiftcore_speech_synthesizer`` hook); ``swiftcore omni-speak --text`` runs the same
code offline, so both give the same samples.
"""

from __future__ import annotations

import json
import wave
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swiftcore.api import SwiftcoreError

__all__ = [
    "MAX_FRAMES",
    "SAMPLE_RATE",
    "Speech",
    "Synthesizer",
    "codes_to_wav",
    "load_synthesizer",
    "pcm16",
    "say",
    "speak",
    "write_wav",
]

#: Qwen3-Omni's output sample rate (Hz).
SAMPLE_RATE = 24_000
#: The most codec frames one reply may have: upstream's Code2Wav chunk (``chunked_decode(chunk_size=300)``).
MAX_FRAMES = 300


@dataclass(frozen=True)
class Speech:
    """One spoken reply: the thinker's text, the talker's codes ``[groups][frames]`` and the WAV written."""

    text: str
    codes: list[list[int]]
    path: Path
    sample_rate: int
    seconds: float


def pcm16(samples: Any) -> Any:
    """Float samples in [-1, 1] (a tensor or array, any shape of one channel) as a 1-D little-endian int16 array."""
    import numpy as np

    data = np.asarray(samples.detach().float().cpu() if hasattr(samples, "detach") else samples, dtype=np.float32)
    return (np.clip(data.reshape(-1), -1.0, 1.0) * 32767.0).round().astype("<i2")


def write_wav(samples: Any, path: str | Path, sample_rate: int = SAMPLE_RATE) -> Path:
    """Write float samples in [-1, 1] (a tensor or array, any shape of one channel) as 16-bit mono PCM WAV."""
    pcm = pcm16(samples)
    out = Path(path)
    with wave.open(str(out), "wb") as handle:
        handle.setnchannels(1)
        handle.setsampwidth(2)
        handle.setframerate(sample_rate)
        handle.writeframes(pcm.tobytes())
    return out


def codes_to_wav(model: Any, codes: Any, path: str | Path) -> Path:
    """Decode codec ``codes`` (``[groups][frames]``) with the model's Code2Wav and write them to ``path``."""
    import torch

    tensor = torch.as_tensor(codes, dtype=torch.long)
    if tensor.ndim != 2 or tensor.shape[0] != model.config.code2wav_config.num_quantizers:
        raise SwiftcoreError(
            f"codes of shape {tuple(tensor.shape)}: expected [groups, frames] with "
            f"{model.config.code2wav_config.num_quantizers} groups (code2wav_config.num_quantizers)"
        )
    with torch.no_grad():
        samples = model.code2wav.chunked_decode(tensor.unsqueeze(0), chunk_size=MAX_FRAMES, left_context_size=25)
    return write_wav(samples, path)


def speak(
    model: Any,
    tokenizer: Any,
    messages: list[dict[str, Any]],
    path: str | Path,
    *,
    speaker: str | None = None,
    max_new_tokens: int = 64,
    max_frames: int = MAX_FRAMES,
) -> Speech:
    """Answer ``messages`` in text and speech (greedy), writing the speech to ``path`` as WAV.

    Args:
        model: a ``Qwen3OmniMoeForConditionalGeneration`` with its talker (``enable_audio_output``).
        tokenizer: the checkpoint's tokenizer (its chat template renders ``messages``).
        messages: the conversation; the reply is generated.
        path: the WAV file to write.
        speaker: one of ``talker_config.speaker_id``'s voices (default: the first).
        max_new_tokens: the thinker's reply budget.
        max_frames: the talker's frame budget (at most :data:`MAX_FRAMES`).

    Raises:
        SwiftcoreError: the model has no talker, the voice is unknown, or ``max_frames`` is out of range.
    """
    voice = _check(model, speaker, max_frames)
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    sequences, samples, codes = _generate(model, ids, voice, max_new_tokens=max_new_tokens, max_frames=max_frames)
    out = write_wav(samples, path)
    text = tokenizer.decode(sequences[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
    return Speech(text, codes, out, SAMPLE_RATE, samples.shape[-1] / SAMPLE_RATE)


def say(
    model: Any,
    tokenizer: Any,
    text: str,
    path: str | Path,
    *,
    speaker: str | None = None,
    max_frames: int = MAX_FRAMES,
) -> Speech:
    """Speak ``text`` verbatim (greedy), writing the speech to ``path`` as WAV: text to speech.

    The user turn holds ``text`` and the thinker's reply is forced to ``text`` (then ``<|im_end|>``), as in the
    talker's training rows ``{"text": ...}`` (:mod:`swiftcore_plugin_qwen3_omni.talker`); the talker then speaks it.

    Args:
        model: a ``Qwen3OmniMoeForConditionalGeneration`` with its talker.
        tokenizer: the checkpoint's tokenizer.
        text: what to say (not empty).
        path: the WAV file to write.
        speaker: one of ``talker_config.speaker_id``'s voices (default: the first).
        max_frames: the talker's frame budget (at most :data:`MAX_FRAMES`).

    Raises:
        SwiftcoreError: no talker, an unknown voice, ``max_frames`` out of range, or an empty ``text``.
    """
    samples, codes = _say(model, tokenizer, text, _check(model, speaker, max_frames), max_frames)
    out = write_wav(samples, path)
    return Speech(text, codes, out, SAMPLE_RATE, samples.shape[-1] / SAMPLE_RATE)


def _voices(model: Any) -> list[str]:
    return list((model.config.talker_config.speaker_id or {}).keys())


def _check(model: Any, speaker: str | None, max_frames: int) -> str:
    """The voice to speak with (lower case, as upstream looks it up), after checking the model can speak."""
    if not getattr(model, "has_talker", False):
        raise SwiftcoreError(
            "speak: the checkpoint has no talker (enable_audio_output is false); it answers in text only"
        )
    voices = _voices(model)
    voice = (speaker or (voices[0] if voices else "")).lower()
    if voice not in voices:
        raise SwiftcoreError(f"speak: voice {speaker!r} is not one of the checkpoint's voices {voices}")
    if not 1 <= max_frames <= MAX_FRAMES:
        raise SwiftcoreError(f"speak: max_frames {max_frames} must be between 1 and {MAX_FRAMES}")
    return voice


def _say(model: Any, tokenizer: Any, text: str, voice: str, max_frames: int) -> tuple[Any, list[list[int]]]:
    """``(samples, codes)`` of ``text`` spoken verbatim (the thinker's reply forced to it)."""
    import transformers

    if not text.strip():
        raise SwiftcoreError("speak: the text to say is empty")
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    reply = [*tokenizer.encode(text, add_special_tokens=False), model.config.im_end_token_id]
    start = ids["input_ids"].shape[1]

    class ForceReply(transformers.LogitsProcessor):
        """Leave only the reply's next token: greedy decoding then emits ``reply`` exactly."""

        def __call__(self, input_ids: Any, scores: Any) -> Any:
            forced = scores.new_full(scores.shape, float("-inf"))
            forced[:, reply[input_ids.shape[1] - start]] = 0.0
            return forced

    _, samples, codes = _generate(
        model,
        ids,
        voice,
        max_new_tokens=len(reply),
        max_frames=max_frames,
        thinker_logits_processor=transformers.LogitsProcessorList([ForceReply()]),
    )
    return samples, codes


def _generate(
    model: Any, ids: Any, voice: str, *, max_new_tokens: int, max_frames: int, **extra: Any
) -> tuple[Any, Any, list[list[int]]]:
    """Upstream's greedy ``generate`` on the rendered prompt ``ids``: ``(sequences, samples, codes)``."""
    import torch

    seen: list[Any] = []
    hook = model.code2wav.register_forward_pre_hook(lambda _module, args: seen.append(args[0].clone()))
    try:
        with torch.no_grad():
            sequences, samples = model.generate(
                ids["input_ids"],
                attention_mask=ids["attention_mask"],
                speaker=voice,
                thinker_max_new_tokens=max_new_tokens,
                thinker_do_sample=False,
                thinker_eos_token_id=model.config.im_end_token_id,
                talker_max_new_tokens=max_frames + 1,
                # At least one frame: upstream's generate fails (an empty torch.stack) on a reply whose first talker
                # token is codec EOS; the prefill step yields the first code, each later step one frame.
                talker_min_new_tokens=2,
                talker_do_sample=False,
                talker_repetition_penalty=1.0,
                **extra,
            )
    finally:
        hook.remove()
    return sequences, samples, seen[0][0].tolist() if seen else []


class Synthesizer:
    """A Qwen3-Omni checkpoint's voice for ``POST /v1/audio/speech`` (swiftcore-serve's ``SpeechSynthesizer``).

    Loads the whole model (thinker, talker, Code2Wav) with plain transformers; :meth:`synthesize` runs :func:`say`'s
    code, so the server's audio is ``swiftcore omni-speak --text``'s, sample for sample.

    Args:
        model_dir: a Qwen3-Omni checkpoint with its talker.
        max_frames: the talker's frame budget per request (bounds the duration).
    """

    sample_rate = SAMPLE_RATE

    def __init__(self, model_dir: str | Path, *, max_frames: int = MAX_FRAMES) -> None:
        import transformers

        self.model = transformers.Qwen3OmniMoeForConditionalGeneration.from_pretrained(str(model_dir)).eval()
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_dir))
        self.max_frames = max_frames
        #: The voices a request may name (``talker_config.speaker_id``), the first the default.
        self.voices: tuple[str, ...] = tuple(_voices(self.model))

    def synthesize(self, text: str, voice: str | None = None) -> tuple[Any, int]:
        """``text`` spoken verbatim: ``(int16 mono samples as a numpy array, sample rate)``.

        Raises:
            SwiftcoreError: an unknown voice or an empty text.
        """
        samples, _ = _say(self.model, self.tokenizer, text, _check(self.model, voice, self.max_frames), self.max_frames)
        return pcm16(samples), SAMPLE_RATE


def load_synthesizer(model_dir: str | Path) -> Synthesizer | None:
    """A :class:`Synthesizer` for ``model_dir``, or None for a checkpoint that cannot speak (a thinker alone, or
    ``enable_audio_output`` false)."""
    config_file = Path(model_dir) / "config.json"
    if not config_file.is_file():
        return None
    config = json.loads(config_file.read_text(encoding="utf-8"))
    if config.get("model_type") != "qwen3_omni_moe" or not config.get("enable_audio_output", True):
        return None
    return Synthesizer(model_dir)
