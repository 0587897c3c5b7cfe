"""``POST /v1/audio/speech`` on ``swiftcore deploy``, through the real ``openai`` client.

A tiny random Qwen3-Omni checkpoint (thinker, talker, Code2Wav) is served by ``swiftcore deploy``; the server
never names the family: swiftcore-plugin-qwen3-omni answers swiftcore-serve's ``swiftcore_speech_synthesizer`` hook.
``client.audio.speech.create`` must give a 24 kHz mono 16-bit WAV whose bytes are exactly those of the offline
``swiftcore omni-speak --text`` for the same text and voice (greedy, so the same codec tokens and samples), whose
length is bounded by the talker's frame budget, ``pcm`` its frames, ``flac`` the same samples losslessly and ``mp3``
a decodable 24 kHz clip; other text must give other audio. Bad requests are 400s naming the field, an unknown
model a 404, and a served model that cannot speak (a tiny Qwen3) a 400 naming the model.
"""

from __future__ import annotations

import io
import json
import subprocess
import wave
from math import prod
from pathlib import Path
from typing import Any

import pytest
from swiftcore_testing import run_swiftcore, user_env

openai = pytest.importorskip("openai")
np = pytest.importorskip("numpy")
soundfile = pytest.importorskip("soundfile")

pytestmark = pytest.mark.slow

MODEL = "omni"  # the served name of tests/conftest.py's omni_client
VOICE = "tiny"  # the tiny checkpoint's one voice (swiftcore_plugin_qwen3_omni.tiny.SPEAKER)
TEXT = "red sun"
OTHER = "blue sky"
RATE = 24_000
#: The talker's frame budget per request (swiftcore_plugin_qwen3_omni.speech.MAX_FRAMES: one Code2Wav chunk).
MAX_FRAMES = 300


def _cli(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    proc = run_swiftcore(*args, timeout=timeout, env=user_env())
    assert proc.returncode == 0, f"swiftcore {args[0]} failed:\n{proc.stderr[-3000:]}"
    return proc


def _wav(data: bytes) -> tuple[int, int, int, bytes]:
    with wave.open(io.BytesIO(data), "rb") as clip:
        return clip.getframerate(), clip.getnchannels(), clip.getsampwidth(), clip.readframes(clip.getnframes())


@pytest.fixture(scope="module")
def client(omni_client: Any) -> Any:
    """The ``openai`` client of this module's ``swiftcore deploy`` of the tiny checkpoint (tests/conftest.py)."""
    return omni_client


@pytest.fixture(scope="module")
def served_wav(client: Any) -> bytes:
    """The server's WAV of :data:`TEXT`."""
    return client.audio.speech.create(model=MODEL, voice=VOICE, input=TEXT, response_format="wav").content


def test_speech_is_the_offline_omni_speak_wav_bounded(served_wav: bytes, tiny_omni: Path, tmp_path: Path) -> None:
    rate, channels, width, frames = _wav(served_wav)
    assert (rate, channels, width) == (RATE, 1, 2)
    code2wav = json.loads((tiny_omni / "config.json").read_text())["code2wav_config"]
    upsample = prod(code2wav["upsample_rates"] + code2wav["upsampling_ratios"])
    assert 0 < len(frames) // 2 <= MAX_FRAMES * upsample
    assert np.abs(np.frombuffer(frames, dtype="<i2")).max() > 0  # not silence
    out = tmp_path / "offline.wav"
    proc = _cli("omni-speak", "--model", str(tiny_omni), "--text", TEXT, "--speaker", VOICE, "--output", str(out))
    assert json.loads(proc.stdout.strip().splitlines()[-1])["text"] == TEXT
    assert out.read_bytes() == served_wav


def test_pcm_flac_and_mp3_carry_the_same_speech(client: Any, served_wav: bytes) -> None:
    frames = _wav(served_wav)[3]
    pcm = client.audio.speech.create(model=MODEL, voice=VOICE, input=TEXT, response_format="pcm").content
    assert pcm == frames
    flac = client.audio.speech.create(model=MODEL, voice=VOICE, input=TEXT, response_format="flac").content
    samples, rate = soundfile.read(io.BytesIO(flac), dtype="int16")
    assert (rate, samples.ndim, samples.tobytes()) == (RATE, 1, frames)  # lossless
    mp3 = client.audio.speech.create(model=MODEL, voice=VOICE, input=TEXT, response_format="mp3").content
    decoded, rate = soundfile.read(io.BytesIO(mp3), dtype="int16")
    assert rate == RATE and decoded.ndim == 1 and len(decoded) >= len(frames) // 2


def test_other_text_other_audio(client: Any, served_wav: bytes) -> None:
    other = client.audio.speech.create(model=MODEL, voice=VOICE.upper(), input=OTHER, response_format="wav").content
    assert _wav(other)[:3] == (RATE, 1, 2)
    assert _wav(other)[3] != _wav(served_wav)[3]


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"input": "  "}, "input"),
        ({"voice": "alloy"}, "voice"),
        ({"response_format": "opus"}, "response_format"),
        ({"speed": 1.5}, "speed"),
        ({"instructions": "whisper"}, "instructions"),
    ],
    ids=["empty-input", "unknown-voice", "opus", "speed", "instructions"],
)
def test_bad_requests_are_400_naming_the_field(client: Any, kwargs: dict[str, Any], param: str) -> None:
    body = {"model": MODEL, "voice": VOICE, "input": TEXT, "response_format": "wav", **kwargs}
    with pytest.raises(openai.BadRequestError) as info:
        client.audio.speech.create(**body)
    assert info.value.status_code == 400
    assert info.value.body["param"] == param, info.value.body


def test_unknown_model_is_404(client: Any) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.audio.speech.create(model="nope", voice=VOICE, input=TEXT, response_format="wav")
    assert info.value.body["param"] == "model"


def test_a_model_without_speech_out_is_a_400_naming_it(tmp_path: Path) -> None:
    from swiftcore_infer import TransformersEngine
    from swiftcore_serve import ServerConfig, build_app
    from swiftcore_testing import ServerThread, make_tiny_qwen3, plugins_with_tiny_qwen3

    engine = TransformersEngine(make_tiny_qwen3(tmp_path / "tiny"), plugins_with_tiny_qwen3())
    with ServerThread(build_app(engine, ServerConfig(model_name="text-only"))) as url:
        mute = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=120)
        with pytest.raises(openai.BadRequestError, match="'text-only' does not speak") as info:
            mute.audio.speech.create(model="text-only", voice=VOICE, input=TEXT, response_format="wav")
        assert info.value.body["param"] == "model"
