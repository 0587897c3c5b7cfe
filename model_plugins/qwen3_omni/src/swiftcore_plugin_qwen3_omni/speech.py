"""Offline speech out: text -> thinker -> talker codes -> Code2Wav -> a WAV file.

:func:`speak` runs upstream's ``Qwen3OmniMoeForConditionalGeneration.generate`` (thinker reply, talker codes,
Code2Wav) greedily, and reads the codes Code2Wav decoded with a forward pre-hook, so the caller gets both. Frames
are capped at :data:`MAX_FRAMES` (one Code2Wav chunk of upstream's ``chunked_decode``): the audio is bounded and the
codes seen are exactly the ones decoded. :func:`codes_to_wav` decodes given codes alone (same codes, same samples).
"""

from __future__ import annotations

import wave
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swiftcore.api import SwiftcoreError

__all__ = ["MAX_FRAMES", "SAMPLE_RATE", "Speech", "codes_to_wav", "speak", "write_wav"]

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


def write_wav(samples: Any, path: str | Path, sample_rate: int = SAMPLE_RATE) -> Path:
    """Write float samples in [-1, 1] (a tensor or array, any shape of one channel) as 16-bit mono PCM WAV."""
    import numpy as np

    data = np.asarray(samples.detach().float().cpu() if hasattr(samples, "detach") else samples, dtype=np.float32)
    pcm = (np.clip(data.reshape(-1), -1.0, 1.0) * 32767.0).round().astype("<i2")
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
    import torch

    if not getattr(model, "has_talker", False):
        raise SwiftcoreError(
            "speak: the checkpoint has no talker (enable_audio_output is false); it answers in text only"
        )
    voices = list((model.config.talker_config.speaker_id or {}).keys())
    voice = (speaker or (voices[0] if voices else "")).lower()
    if voice not in voices:
        raise SwiftcoreError(f"speak: voice {speaker!r} is not one of the checkpoint's voices {voices}")
    if not 1 <= max_frames <= MAX_FRAMES:
        raise SwiftcoreError(f"speak: max_frames {max_frames} must be between 1 and {MAX_FRAMES}")
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
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
            )
    finally:
        hook.remove()
    out = write_wav(samples, path)
    text = tokenizer.decode(sequences[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
    codes = seen[0][0].tolist() if seen else []
    return Speech(text, codes, out, SAMPLE_RATE, samples.shape[-1] / SAMPLE_RATE)
