"""Media items of a record: the value a content part carries, and decoding images and audio.

Importing this module does not import PIL or numpy; decoding does. A caller's bounds (``max_pixels``,
``max_seconds``) are checked against the file's header, before anything is decoded: a small file can
declare a huge image or hours of audio.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from swiftcore_media.errors import MediaError, MediaLimitError

__all__ = ["load_audio", "load_image", "media_value"]


def media_value(item: Any, kind: str) -> Any | None:
    """The value a content part carries (path, URL, PIL image, array ...), or None when it has none.

    Understands ``{"type": "image", "image": x}``, OpenAI's ``{"type": "image_url", "image_url": {"url": x}}``
    and ``{"type": "input_audio", "input_audio": {"data": b64, "format": "wav"}}``, and ``audio_url``.
    """
    if not isinstance(item, Mapping):
        return item
    for key in (kind, f"{kind}_url", f"input_{kind}"):
        value = item.get(key)
        if value is None:
            continue
        if isinstance(value, Mapping) and "url" in value:
            return value["url"]
        return value
    return None


def _read_source(value: Any, what: str) -> bytes | str | Path:
    """A path, ``file://`` or ``data:`` URL -> a path or the bytes."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, Path):
        return value
    if isinstance(value, str):
        if value.startswith("data:"):
            return base64.b64decode(value.partition(",")[2])
        if value.startswith("file://"):
            return Path(value[len("file://") :])
        if value.startswith(("http://", "https://")):
            raise MediaError(f"{what}: {value!r} is a URL; download it and give its path (training reads local files)")
        if "\x00" in value:
            raise MediaError(f"{what}: the path {value[:80]!r} holds a NUL character; no file can be named so")
        return Path(value)
    raise MediaError(f"{what}: cannot read a {type(value).__name__}; give a path, bytes or a decoded object")


def load_image(value: Any, what: str = "image", *, max_pixels: int | None = None) -> Any:
    """A PIL image (RGB) from a PIL image, path, ``file://`` / ``data:`` URL, bytes, numpy array, or a
    ``{"bytes", "path"}`` dict (a Hugging Face ``Image`` feature).

    Args:
        max_pixels: refuse an image of more pixels (width x height), read from its header before it is decoded.

    Raises:
        MediaError: the file is missing or not an image.
        MediaLimitError: the image is over ``max_pixels``.
    """
    from PIL import Image

    if isinstance(value, Image.Image):
        _check_pixels(value.width, value.height, max_pixels, what)
        return value.convert("RGB")
    if isinstance(value, Mapping):
        value = value.get("bytes") or value.get("path")
    if hasattr(value, "__array__") and not isinstance(value, (str, bytes)):
        import numpy as np

        array = np.asarray(value)
        if array.ndim >= 2:
            _check_pixels(array.shape[1], array.shape[0], max_pixels, what)
        return Image.fromarray(array).convert("RGB")
    source = _read_source(value, what)
    try:
        image = Image.open(io.BytesIO(source) if isinstance(source, bytes) else source)  # reads the header only
        _check_pixels(image.width, image.height, max_pixels, what)
        image.load()
    except FileNotFoundError as exc:
        raise MediaError(f"{what}: file {str(source)!r} not found; fix the path in the dataset") from exc
    except OSError as exc:
        raise MediaError(f"{what}: cannot read {_describe(source)} as an image ({exc})") from exc
    return image.convert("RGB")


def _check_pixels(width: int, height: int, max_pixels: int | None, what: str) -> None:
    if max_pixels is not None and width * height > max_pixels:
        raise MediaLimitError(what, f"{width}x{height} pixels", f"{max_pixels} pixels")


def _check_seconds(frames: int, rate: int, max_seconds: float | None, what: str) -> None:
    if rate <= 0:
        raise MediaError(f"{what}: its header gives a sample rate of {rate} Hz; it is not playable audio")
    if max_seconds is not None and frames / rate > max_seconds:
        raise MediaLimitError(what, f"{frames / rate:.1f} s of audio", f"{max_seconds:g} s")


def _describe(source: Any) -> str:
    """A file's path (a long one by its end, where the file's name is), or the size of inline bytes (their repr says
    nothing to a reader)."""
    if isinstance(source, bytes):
        return f"the {len(source)} given bytes"
    text = str(source)
    return repr(text if len(text) <= 80 else "..." + text[-77:])


def load_audio(value: Any, sampling_rate: int, what: str = "audio", *, max_seconds: float | None = None) -> Any:
    """A mono float32 numpy waveform at ``sampling_rate`` Hz.

    Accepts a numpy array (taken to be at ``sampling_rate`` already), a ``{"array", "sampling_rate"}``
    dict (a Hugging Face ``Audio`` feature), OpenAI's ``{"data": base64, "format": "wav"}``, a path or a
    ``file://`` / ``data:`` URL. PCM WAV files are read with the standard library; other formats need
    ``soundfile``.

    Args:
        max_seconds: refuse a longer clip; a file's length is read from its header, and it is decoded (and
            resampled) only when within the bound.

    Raises:
        MediaError: the file is missing or cannot be decoded.
        MediaLimitError: the clip is over ``max_seconds``.
    """
    import numpy as np

    rate = sampling_rate
    if isinstance(value, Mapping):
        if "array" in value:
            value, rate = value["array"], int(value.get("sampling_rate") or sampling_rate)
        elif "data" in value:
            value = base64.b64decode(value["data"])
        else:
            value = value.get("bytes") or value.get("path")
    if hasattr(value, "__array__") and not isinstance(value, (str, bytes)):
        wave = np.asarray(value, dtype=np.float32)
    else:
        wave, rate = _decode_audio(_read_source(value, what), what, max_seconds)
    _check_seconds(len(wave), rate, max_seconds, what)  # also arrays, before resampling multiplies them
    if wave.ndim == 2:  # (frames, channels) -> mono
        wave = wave.mean(axis=1)
    if wave.ndim != 1 or wave.size == 0:
        raise MediaError(f"{what}: expected a non-empty mono or (frames, channels) waveform, got shape {wave.shape}")
    return _resample(wave.astype(np.float32), rate, sampling_rate)


def _decode_audio(source: bytes | str | Path, what: str, max_seconds: float | None) -> tuple[Any, int]:
    import wave as wavefile

    import numpy as np

    handle = io.BytesIO(source) if isinstance(source, bytes) else source
    try:
        with wavefile.open(handle if isinstance(handle, io.BytesIO) else str(handle), "rb") as wav:
            width, channels, rate = wav.getsampwidth(), wav.getnchannels(), wav.getframerate()
            frames = wav.getnframes()
            _check_seconds(frames, rate, max_seconds, what)
            raw = wav.readframes(frames)
    except FileNotFoundError as exc:
        raise MediaError(f"{what}: file {str(source)!r} not found; fix the path in the dataset") from exc
    except (wavefile.Error, EOFError) as exc:
        return _decode_with_soundfile(source, what, exc, max_seconds)
    if len(raw) < frames * width * channels:
        raise MediaError(
            f"{what}: truncated WAV: its header says {frames} frames, the data holds "
            f"{len(raw) // max(width * channels, 1)}; send the whole file"
        )
    if width == 1:
        data = (np.frombuffer(raw, np.uint8).astype(np.float32) - 128.0) / 128.0
    elif width in (2, 4):
        dtype = np.int16 if width == 2 else np.int32
        data = np.frombuffer(raw, dtype).astype(np.float32) / float(np.iinfo(dtype).max + 1)
    else:  # 24-bit: sign-extend three little-endian bytes into int32
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        data = ((b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)) << 8 >> 8).astype(np.float32) / float(1 << 23)
    return data.reshape(-1, channels), rate


def _decode_with_soundfile(
    source: bytes | str | Path, what: str, wav_error: Exception, max_seconds: float | None
) -> tuple[Any, int]:
    try:
        import soundfile
    except ImportError:
        raise MediaError(
            f"{what}: {_describe(source)} is not a PCM WAV file ({wav_error}); `pip install soundfile` to read "
            "other formats (FLAC, OGG, float WAV), or convert it to 16-bit WAV"
        ) from None
    try:
        with soundfile.SoundFile(io.BytesIO(source) if isinstance(source, bytes) else str(source)) as sound:
            rate = int(sound.samplerate)
            _check_seconds(sound.frames, rate, max_seconds, what)
            # The header's frame count caps the read; a bounded caller's read stops one frame past its bound too
            # (an encoder may write no count or a wrong one), and load_audio refuses what got past it.
            bound = -1 if max_seconds is None else int(max_seconds * rate) + 1
            data = sound.read(frames=bound, dtype="float32")
    except RuntimeError as exc:
        raise MediaError(f"{what}: cannot decode {_describe(source)} as audio ({exc})") from exc
    return data, rate


def _resample(wave: Any, rate: int, target: int) -> Any:
    """Band-limited resampling: scipy's polyphase filter when installed, else a windowed-sinc low-pass and
    linear interpolation (numpy only)."""
    import numpy as np

    if rate == target:
        return wave
    try:
        from math import gcd

        from scipy.signal import resample_poly

        g = gcd(rate, target)
        return resample_poly(wave, target // g, rate // g).astype(np.float32)
    except ImportError:
        pass
    if target < rate:  # low-pass at the new Nyquist so that downsampling does not alias
        cutoff = target / rate / 2
        taps = np.arange(-32, 33)
        kernel = 2 * cutoff * np.sinc(2 * cutoff * taps) * np.hamming(len(taps))
        wave = np.convolve(wave, kernel / kernel.sum(), mode="same")
    n_out = max(1, round(len(wave) * target / rate))
    return np.interp(np.arange(n_out) * rate / target, np.arange(len(wave)), wave).astype(np.float32)
