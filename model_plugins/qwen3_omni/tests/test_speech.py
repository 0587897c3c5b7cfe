"""Speech out: text -> thinker -> talker codes -> Code2Wav -> a valid, bounded, deterministic WAV; text to speech
(say, the server's Synthesizer) speaks the text as a talker training row of it would."""

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


def test_say_speaks_the_text_as_the_talker_row_of_it_would(omni, tmp_path: Path) -> None:
    """Text to speech: the reply is the text itself, and the talker's input is that of a training row {"text": ...}
    (teacher-forcing the spoken codes through talker_batch, the talker's argmax at every frame is the code said)."""
    import torch
    from swiftcore_plugin_qwen3_omni.speech import say
    from swiftcore_plugin_qwen3_omni.talker import talker_batch

    model, tokenizer = omni
    speech = say(model, tokenizer, "the dog", tmp_path / "said.wav", max_frames=8)
    assert speech.text == "the dog"
    codes = [list(frame) for frame in zip(*speech.codes, strict=True)]  # [frames, groups]
    assert 0 < len(codes) <= 8
    batch = talker_batch(model, tokenizer, {"text": "the dog", "codes": codes})
    with torch.no_grad():
        logits = model.talker(**batch).logits[0, :-1]
    scored = batch["labels"][0, 1:] != -100
    allowed = torch.zeros(logits.shape[-1])
    allowed[max(0, logits.shape[-1] - 1024) :] = float("-inf")  # upstream suppresses these ids but codec EOS
    allowed[model.config.talker_config.codec_eos_token_id] = 0.0
    assert (logits[scored] + allowed).argmax(-1).tolist()[: len(codes)] == [frame[0] for frame in codes]
    # Another text is another reply: other codes.
    assert say(model, tokenizer, "a red sun", tmp_path / "other.wav", max_frames=8).codes != speech.codes


def test_synthesizer_gives_say_s_samples_and_refuses_what_it_cannot_say(tiny_dir: Path, tmp_path: Path) -> None:
    from swiftcore_plugin_qwen3_omni.speech import SAMPLE_RATE, load_synthesizer, say

    from swiftcore.api import SwiftcoreError

    synthesizer = load_synthesizer(tiny_dir)
    assert synthesizer is not None and synthesizer.voices == ("tiny",)
    samples, rate = synthesizer.synthesize("the dog", "TINY")
    offline = say(synthesizer.model, synthesizer.tokenizer, "the dog", tmp_path / "a.wav")
    assert rate == SAMPLE_RATE and samples.dtype.str == "<i2"
    assert samples.tobytes() == _read(offline.path)[3]
    with pytest.raises(SwiftcoreError, match="voice 'alloy' is not one of"):
        synthesizer.synthesize("the dog", "alloy")
    with pytest.raises(SwiftcoreError, match="text to say is empty"):
        synthesizer.synthesize("  ")
    # A thinker alone does not speak.
    (tmp_path / "thinker").mkdir()
    (tmp_path / "thinker" / "config.json").write_text('{"model_type": "qwen3_omni_moe_thinker"}')
    assert load_synthesizer(tmp_path / "thinker") is None
