"""The chat tab's engine (:class:`swiftcore_webui.chat.ChatSession`) on tiny checkpoints: replies stream piece by
piece, attached images and audio reach the engine's media path for families that take them, and are refused with
the engine's message for those that do not."""

from __future__ import annotations

import io
import itertools
import wave
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from swiftcore_webui.chat import ChatSession, user_message
from swiftcore_webui.paths import Root

from swiftcore.api import SwiftcoreError

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def plugins() -> Any:
    from swiftcore.api.plugins import load_plugins

    return load_plugins(env={})


@pytest.fixture(scope="module")
def session_for(plugins: Any, tiny_model_dir: Callable[[str], Path]) -> Iterator[Callable[[str], ChatSession]]:
    sessions: dict[str, ChatSession] = {}

    def get(family: str) -> ChatSession:
        if family not in sessions:
            model = tiny_model_dir(family)
            session = ChatSession(Root.at(model.parent), plugins)
            loaded = session.load(model.name)
            assert loaded.spec == family and loaded.model_dir == model.name
            sessions[family] = session
        return sessions[family]

    yield get
    for session in sessions.values():
        session.close()


def _png(path: Path) -> Path:
    from PIL import Image

    Image.new("RGB", (32, 32), (200, 30, 90)).save(path)
    return path


def _wav(path: Path, seconds: float = 0.5, rate: int = 16_000) -> Path:
    import math

    frames = b"".join(
        int(12000 * math.sin(2 * math.pi * 440 * i / rate)).to_bytes(2, "little", signed=True)
        for i in range(int(rate * seconds))
    )
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(frames)
    path.write_bytes(buffer.getvalue())
    return path


def test_replies_stream_and_end_parsed(session_for: Callable[[str], ChatSession]) -> None:
    session = session_for("qwen3_5")
    assert session.loaded is not None and session.loaded.modalities == ("image",)
    pieces = list(session.stream([user_message("Is 7 even or odd?")], max_new_tokens=24, enable_thinking=False))
    partial, final = pieces[:-1], pieces[-1]
    assert final.done and not any(p.done for p in partial)
    assert len(partial) >= 3, "the reply came in one piece"
    assert all(b.text.startswith(a.text) for a, b in itertools.pairwise(partial)), "each piece extends the last"
    assert final.finish_reason in ("stop", "length")
    assert final.content or final.reasoning  # a random model says something


def test_an_image_goes_through_the_engine_and_audio_is_refused(
    session_for: Callable[[str], ChatSession], tmp_path: Path
) -> None:
    session = session_for("qwen3_5")
    message = user_message("What is this?", [str(_png(tmp_path / "red.png"))])
    assert [part["type"] for part in message["content"]] == ["image", "text"]
    assert isinstance(message["content"][0]["image"]["data"], str)  # inline data: the engine opens no path
    final = list(session.stream([message], max_new_tokens=8, enable_thinking=False))[-1]
    assert final.done
    prompt = session.engine.encode(_request(message))
    assert getattr(prompt, "media", None), "the image did not reach the engine's media path"
    with pytest.raises(SwiftcoreError, match="does not accept audio"):
        list(session.stream([user_message("Hear this", [str(_wav(tmp_path / "tone.wav"))])]))


def test_audio_goes_through_for_an_audio_family(session_for: Callable[[str], ChatSession], tmp_path: Path) -> None:
    session = session_for("qwen3_asr")
    assert session.loaded is not None and "audio" in session.loaded.modalities
    message = user_message("", [str(_wav(tmp_path / "tone.wav"))])
    final = list(session.stream([message], max_new_tokens=8))[-1]
    assert final.done
    assert getattr(session.engine.encode(_request(message)), "media", None)


def test_no_model_loaded_is_a_clear_error(plugins: Any, tmp_path: Path) -> None:
    with pytest.raises(SwiftcoreError, match="no model is loaded"):
        next(ChatSession(Root.at(tmp_path), plugins).stream([user_message("hi")]))


def _request(message: dict[str, Any]) -> Any:
    from swiftcore_infer import Request, SamplingParams

    return Request(record={"messages": [message]}, sampling=SamplingParams(max_new_tokens=1))
