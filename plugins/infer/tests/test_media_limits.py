"""A server's media limits hold before decoding: a small file declaring a huge image or hours of audio is refused
from its header, with no more than a few MB of memory spent (measured in a fresh process: ``ru_maxrss``)."""

from __future__ import annotations

import base64
import io
import json
import struct
import subprocess
import sys
import wave
import zlib

import pytest

#: Decodes ``sys.argv[1]`` (a JSON chat record) with the default server policy and prints the 400's message
#: and how much the peak RSS grew (KiB on Linux). Every library decoding may need is imported first.
_DECODE = """
import json, resource, sys
import numpy, PIL.Image, PIL.PngImagePlugin, scipy.signal, soundfile
from swiftcore_infer.errors import InvalidRequestError
from swiftcore_infer.media import MediaPolicy, decode_media
record = json.loads(open(sys.argv[1]).read())
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    decode_media(record, 16000, policy=MediaPolicy())
    message = None
except InvalidRequestError as exc:
    message = str(exc)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"message": message, "grew_kib": after - before}))
"""


def _png_of_zeros(width: int, height: int) -> bytes:
    """A valid greyscale PNG of ``width`` x ``height`` black pixels, compressed row by row (little memory)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    compressor, row, parts = zlib.compressobj(9), bytes(width + 1), []  # each row: filter 0, then the pixels
    for _ in range(height):
        parts.append(compressor.compress(row))
    parts.append(compressor.flush())
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", b"".join(parts)) + chunk(b"IEND", b"")


def _wav_at_1_hz(frames: int) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(1)
        w.writeframes(bytes(2 * frames))
    return out.getvalue()


def _flac_of_silence(hours: float) -> bytes:
    import numpy as np
    import soundfile

    out, minute = io.BytesIO(), np.zeros(16000 * 60, dtype=np.int16)
    with soundfile.SoundFile(out, "w", samplerate=16000, channels=1, format="FLAC", subtype="PCM_16") as sound:
        for _ in range(round(hours * 60)):
            sound.write(minute)
    return out.getvalue()


def _image(data: bytes) -> dict:
    return {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(data).decode()}}


def _audio(data: bytes, fmt: str) -> dict:
    return {"type": "input_audio", "input_audio": {"data": base64.b64encode(data).decode(), "format": fmt}}


@pytest.mark.parametrize(
    ("make", "size_kib", "expected"),
    [
        (lambda: _image(_png_of_zeros(13000, 13000)), 1000,
         "13000x13000 pixels, over this server's limit of 16777216 pixels"),
        (lambda: _audio(_wav_at_1_hz(5000), "wav"), 11, "5000.0 s of audio, over this server's limit of 600 s"),
        (lambda: _audio(_flac_of_silence(1), "flac"), 400, "3600.0 s of audio, over this server's limit of 600 s"),
    ],
    ids=["png-13000x13000", "wav-1hz", "flac-1h-silence"],
)  # fmt: skip
def test_media_over_a_limit_is_refused_from_its_header(make, size_kib, expected, tmp_path) -> None:
    from swiftcore_infer import openai_media_parts

    part = make()
    record = openai_media_parts({"messages": [{"role": "user", "content": [part]}]}, ("image", "audio"), "m")
    encoded = json.dumps(record)
    assert len(encoded) < size_kib * 1024 * 4 / 3 + 1024, "the file must be small: the point is what it declares"
    path = tmp_path / "record.json"
    path.write_text(encoded)
    done = subprocess.run([sys.executable, "-c", _DECODE, str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["message"] is not None and expected in result["message"], result
    assert result["grew_kib"] < 100 * 1024, f"decoding grew the peak RSS by {result['grew_kib'] // 1024} MiB"
