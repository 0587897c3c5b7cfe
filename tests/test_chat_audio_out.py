"""Spoken chat replies (``modalities: ["text", "audio"]``) on ``swiftcore deploy``, through the real ``openai`` client.

A tiny random Qwen3-Omni (tests/conftest.py's ``tiny_omni``, served once for this module by ``omni_client``) answers
``chat.completions.create(modalities=["text", "audio"], audio={"voice", "format"})`` greedily. The reply's
``message.audio`` must hold OpenAI's ``{id, data, expires_at, transcript}``: the transcript is the text reply the same
request gives without audio (and the message's ``content``), and ``data`` is base64 of a 24 kHz mono 16-bit WAV
whose bytes are ``POST /v1/audio/speech``'s for that transcript and voice (one code path); ``pcm16`` is its raw
frames. Streamed, the content pieces are the transcript's and one ``delta.audio`` chunk carries the same audio
(and the id, once). A spoken reply sent back as history prompts the model exactly as its text does. Bad requests
are 400s naming the field; a served model without a voice (a tiny Qwen3) is a 400 naming ``modalities``.
"""

from __future__ import annotations

import base64
import io
import wave
from pathlib import Path
from typing import Any

import pytest

openai = pytest.importorskip("openai")
np = pytest.importorskip("numpy")

pytestmark = pytest.mark.slow

MODEL = "omni"  # the served name of tests/conftest.py's omni_client
VOICE = "tiny"  # the tiny checkpoint's one voice (swiftcore_plugin_qwen3_omni.tiny.SPEAKER)
RATE = 24_000
MESSAGES = [{"role": "user", "content": "Name a colour."}]
#: Greedy and short: the same request gives the same reply, and the talker speaks a few tokens only.
GREEDY = {"temperature": 0, "max_tokens": 6}


def _wav(data: bytes) -> tuple[int, int, int, bytes]:
    with wave.open(io.BytesIO(data), "rb") as clip:
        return clip.getframerate(), clip.getnchannels(), clip.getsampwidth(), clip.readframes(clip.getnframes())


def _spoken(client: Any, fmt: str = "wav", **extra: Any) -> Any:
    return client.chat.completions.create(
        model=MODEL, messages=MESSAGES, modalities=["text", "audio"], audio={"voice": VOICE, "format": fmt},
        **GREEDY, **extra,
    )  # fmt: skip


@pytest.fixture(scope="module")
def text_reply(omni_client: Any) -> str:
    """The text reply to :data:`MESSAGES`, without audio."""
    reply = omni_client.chat.completions.create(model=MODEL, messages=MESSAGES, **GREEDY)
    message = reply.choices[0].message
    assert message.audio is None
    assert message.content and message.content.strip(), "the tiny model said nothing: pick other MESSAGES"
    return message.content


@pytest.fixture(scope="module")
def spoken(omni_client: Any) -> Any:
    """The same request with ``modalities: ["text", "audio"]`` and a WAV."""
    return _spoken(omni_client)


def test_transcript_is_the_text_reply(spoken: Any, text_reply: str) -> None:
    message = spoken.choices[0].message
    assert message.audio is not None
    assert message.audio.transcript == text_reply
    assert message.content == text_reply  # kept: a client reading content alone still has the reply
    assert message.audio.id.startswith("audio_")
    assert message.audio.expires_at == spoken.created  # the server keeps no audio for later turns
    assert spoken.choices[0].finish_reason in ("stop", "length")


def test_audio_is_the_speech_routes_wav_of_the_transcript(spoken: Any, omni_client: Any) -> None:
    audio = spoken.choices[0].message.audio
    data = base64.b64decode(audio.data)
    rate, channels, width, frames = _wav(data)
    assert (rate, channels, width) == (RATE, 1, 2)
    assert len(frames) > 0 and np.abs(np.frombuffer(frames, dtype="<i2")).max() > 0  # not silence
    said = omni_client.audio.speech.create(model=MODEL, voice=VOICE, input=audio.transcript, response_format="wav")
    assert data == said.content


def test_pcm16_is_the_wavs_frames(spoken: Any, omni_client: Any) -> None:
    raw = _spoken(omni_client, "pcm16").choices[0].message.audio
    assert raw.transcript == spoken.choices[0].message.audio.transcript
    assert base64.b64decode(raw.data) == _wav(base64.b64decode(spoken.choices[0].message.audio.data))[3]


def test_a_spoken_reply_sent_back_prompts_as_its_text(spoken: Any, omni_client: Any) -> None:
    returned = spoken.choices[0].message.model_dump(exclude_none=True)  # content, audio {id, data, ...}
    as_text = {"role": "assistant", "content": returned["content"]}
    only_audio = {"role": "assistant", "audio": returned["audio"]}  # OpenAI's shape: content null, the transcript
    follow_up = {"role": "user", "content": "Again."}
    prompts = []
    for turn in (returned, as_text, only_audio):
        reply = omni_client.chat.completions.create(
            model=MODEL, messages=[*MESSAGES, turn, follow_up], temperature=0, max_tokens=1
        )
        prompts.append(reply.usage.prompt_tokens)
    assert prompts[0] == prompts[1] == prompts[2]


def test_streamed_audio_is_the_unstreamed_reply(omni_client: Any, text_reply: str) -> None:
    whole = _spoken(omni_client, "pcm16").choices[0].message.audio
    content, audio = [], []
    for chunk in _spoken(omni_client, "pcm16", stream=True):
        if chunk.choices:
            delta = chunk.choices[0].delta
            content.append(delta.content or "")
            audio.append(delta.to_dict().get("audio") or {})  # the fields sent (ChoiceDeltaAudio has them all)
    assert "".join(content) == text_reply
    pieces = [a for a in audio if a]
    assert "".join(a.get("transcript", "") for a in pieces) == text_reply
    ids = [a["id"] for a in pieces if "id" in a]  # once: OpenAI's accumulators concatenate strings
    assert len(ids) == 1 and ids[0].startswith("audio_")
    data = [a["data"] for a in pieces if "data" in a]
    assert len(data) == 1 and base64.b64decode(data[0]) == base64.b64decode(whole.data)
    assert sum(1 for a in pieces if "expires_at" in a) == 1


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"modalities": ["text", "video"]}, "modalities"),
        ({"modalities": ["text", "audio"]}, "audio"),  # audio left out
        ({"modalities": ["text"], "audio": {"voice": VOICE, "format": "wav"}}, "audio"),  # audio never asked for
        ({"audio": {"voice": VOICE, "format": "wav"}}, "audio"),  # modalities left out: text only
        ({"modalities": ["text", "audio"], "audio": {"voice": VOICE, "format": "opus"}}, "audio.format"),
        ({"modalities": ["text", "audio"], "audio": {"voice": "alloy", "format": "wav"}}, "audio.voice"),
        ({"modalities": ["text", "audio"], "audio": {"format": "wav"}}, "audio.voice"),
        (
            {"modalities": ["text", "audio"], "audio": {"voice": "alloy", "format": "wav"}, "stream": True},
            "audio.voice",
        ),
    ],
    ids=[
        "unknown-modality",
        "no-audio",
        "audio-text-only",
        "audio-no-modalities",
        "opus",
        "unknown-voice",
        "no-voice",
        "unknown-voice-streamed",
    ],
)
def test_bad_requests_are_400_naming_the_field(omni_client: Any, extra: dict[str, Any], param: str) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        omni_client.chat.completions.create(model=MODEL, messages=MESSAGES, **GREEDY, **extra)
    assert info.value.status_code == 400
    assert info.value.body["param"] == param, info.value.body
    if param == "audio.voice" and "voice" in extra["audio"]:
        assert "['tiny']" in info.value.body["message"]  # the voices there are


def test_a_model_without_a_voice_is_a_400_naming_modalities(tmp_path: Path) -> None:
    from swiftcore_infer import TransformersEngine
    from swiftcore_serve import ServerConfig, build_app
    from swiftcore_testing import ServerThread, make_tiny_qwen3, plugins_with_tiny_qwen3

    engine = TransformersEngine(make_tiny_qwen3(tmp_path / "tiny"), plugins_with_tiny_qwen3())
    with ServerThread(build_app(engine, ServerConfig(model_name="text-only"))) as url:
        mute = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=120)
        with pytest.raises(openai.BadRequestError, match="'text-only' does not speak") as info:
            mute.chat.completions.create(
                model="text-only", messages=MESSAGES, modalities=["text", "audio"],
                audio={"voice": VOICE, "format": "wav"}, **GREEDY,
            )  # fmt: skip
        assert info.value.body["param"] == "modalities"
        plain = mute.chat.completions.create(model="text-only", messages=MESSAGES, **GREEDY)  # text alone still
        assert plain.choices[0].message.audio is None
