"""The bounds a caller puts on :func:`load_image` / :func:`load_audio` hold from the file's header, and a path
no file can have is a :class:`MediaError`, not an OS error."""

from __future__ import annotations

import io
import wave

import numpy as np
import pytest
from PIL import Image
from swiftcore_media import MediaError, MediaLimitError, load_audio, load_image

RATE = 16_000


def _png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("L", (width, height)).save(out, format="PNG")
    return out.getvalue()


def _wav(frames: int, rate: int) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(rate)
        w.writeframes(bytes(2 * frames))
    return out.getvalue()


def _flac(frames: int, rate: int) -> bytes:
    import soundfile

    out = io.BytesIO()
    soundfile.write(out, np.zeros(frames, dtype=np.int16), rate, format="FLAC")
    return out.getvalue()


def test_an_image_over_max_pixels_is_refused_before_it_is_decoded(monkeypatch) -> None:
    from PIL import PngImagePlugin

    def no_decoding(self):  # the header must be enough
        raise AssertionError("the image was decoded")

    data = _png(300, 200)
    assert load_image(data, "img", max_pixels=60_000).size == (300, 200)
    monkeypatch.setattr(PngImagePlugin.PngImageFile, "load", no_decoding)
    with pytest.raises(MediaLimitError, match=r"^img: 300x200 pixels, over the limit of 59999 pixels$") as caught:
        load_image(data, "img", max_pixels=59_999)
    assert caught.value.shown == "300x200 pixels"
    with pytest.raises(MediaLimitError, match="300x200 pixels"):  # decoded values are held to it too
        load_image(np.zeros((200, 300, 3), dtype=np.uint8), "img", max_pixels=59_999)


@pytest.mark.parametrize("kind", ["wav", "flac"])
def test_a_clip_over_max_seconds_is_refused_before_it_is_decoded(kind, monkeypatch) -> None:
    import soundfile

    data = _wav(3 * 8000, 8000) if kind == "wav" else _flac(3 * 8000, 8000)
    assert len(load_audio(data, RATE, "clip", max_seconds=3)) == 3 * RATE
    monkeypatch.setattr(wave.Wave_read, "readframes", lambda self, n: pytest.fail("the WAV was decoded"))
    monkeypatch.setattr(soundfile.SoundFile, "read", lambda self, *a, **k: pytest.fail("the FLAC was decoded"))
    with pytest.raises(MediaLimitError, match=r"^clip: 3\.0 s of audio, over the limit of 2\.5 s$"):
        load_audio(data, RATE, "clip", max_seconds=2.5)


def test_a_1_hz_wav_is_refused_before_it_is_resampled() -> None:
    with pytest.raises(MediaLimitError, match="5000.0 s of audio"):
        load_audio(_wav(5000, 1), RATE, "clip", max_seconds=600)


@pytest.mark.parametrize("load", [load_image, lambda v, what: load_audio(v, RATE, what)], ids=["image", "audio"])
def test_a_path_with_a_nul_is_a_media_error(load) -> None:
    with pytest.raises(MediaError, match=r"^item: the path 'a\\x00b\.png' holds a NUL character"):
        load("a\x00b.png", "item")
