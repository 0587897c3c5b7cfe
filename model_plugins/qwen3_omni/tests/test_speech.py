"""Offline speech out: text -> thinker -> talker codes -> Code2Wav -> a valid, bounded, deterministic WAV."""

from __future__ import annotations

import wave
from pathlib import Path

import pytest


def _read(path: Path) -> tuple[int, int, int, bytes]:
    with wave.open(str(path), "rb") as handle:
        return handle.getframerate(), handle.getnchannels(), handle.getsampwidth(), handle.readframes(10**7)


def test_speak_writes_a_bounded_wav_whose_codes_decode_to_the_same_audio(omni, tmp_path: Path) -> None:
    from swiftcore_plugin_qwen3_omni.speech import SAMPLE_RATE, codes_to_wav, speak

    model, tokenizer = omni
    frames = 12
    speech = speak(
        model,
        tokenizer,
        [{"role": "user", "content": "the dog"}],
        tmp_path / "a.wav",
        max_frames=frames,
        max_new_tokens=6,
    )
    rate, channels, width, pcm = _read(speech.path)
    assert (rate, channels, width) == (SAMPLE_RATE, 1, 2)
    samples = len(pcm) // 2
    assert 0 < samples <= frames * int(model.code2wav.total_upsample)
    assert speech.seconds == pytest.approx(samples / SAMPLE_RATE)
    groups = model.config.code2wav_config.num_quantizers
    assert len(speech.codes) == groups and 0 < len(speech.codes[0]) <= frames
    # The same codes decode, alone, to the same samples; greedy speaking again gives the same file.
    assert _read(codes_to_wav(model, speech.codes, tmp_path / "b.wav"))[3] == pcm
    again = speak(
        model,
        tokenizer,
        [{"role": "user", "content": "the dog"}],
        tmp_path / "c.wav",
        max_frames=frames,
        max_new_tokens=6,
    )
    assert (again.codes, _read(again.path)[3]) == (speech.codes, pcm)
    # Other codes, other audio: the file carries the codes, not a constant.
    other = [[(c + 1) % model.config.code2wav_config.codebook_size for c in group] for group in speech.codes]
    assert _read(codes_to_wav(model, other, tmp_path / "d.wav"))[3] != pcm


def test_speech_refuses_what_it_cannot_say(omni, tmp_path: Path) -> None:
    from swiftcore_plugin_qwen3_omni.speech import codes_to_wav, speak

    from swiftcore.api import SwiftcoreError

    model, tokenizer = omni
    with pytest.raises(SwiftcoreError, match="voice 'nobody' is not one of"):
        speak(model, tokenizer, [{"role": "user", "content": "hi"}], tmp_path / "x.wav", speaker="nobody")
    with pytest.raises(SwiftcoreError, match="max_frames 301"):
        speak(model, tokenizer, [{"role": "user", "content": "hi"}], tmp_path / "x.wav", max_frames=301)
    with pytest.raises(SwiftcoreError, match=r"expected \[groups, frames\] with 4 groups"):
        codes_to_wav(model, [[1, 2, 3]], tmp_path / "y.wav")
