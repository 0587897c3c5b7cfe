"""Train -> infer -> serve for Qwen3-ASR: transcripts a model learned from audio come back in ``content``.

The sibling of ``test_train_serve_roundtrip.py`` for the audio family (its rows carry audio, its replies no
reasoning). A tiny Qwen3-ASR is fully fine-tuned by ``swiftcore train`` on four synthetic clips (a low tone,
a high tone, a chirp, a square wave; 16-bit WAV made with numpy), each with its own transcript in the
official reply format ``language English<asr_text>TRANSCRIPT``. The ASR template ignores user text, so the
prompt is the same for every clip: the audio is the only thing that tells the transcripts apart, and four
distinct right answers show the model heard it (learned, not just run). Then:

- ``swiftcore infer --input`` on the training rows themselves (two with ``{"type": "audio"}`` parts, two with
  an ``<audio>`` tag and an ``audios`` column, exactly as training reads them), and ``--audio CLIP``;
- ``swiftcore deploy`` with the real ``openai`` client sending each clip as an ``input_audio`` part,
  streamed and not, and uploading it to ``/v1/audio/transcriptions`` (``audio.transcriptions.create``),

answer each clip with its transcript in ``content``.
"""

from __future__ import annotations

import base64
import io
import json
import subprocess
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from swiftcore_testing import deploy_process, run_swiftcore, user_env

openai = pytest.importorskip("openai")
np = pytest.importorskip("numpy")

API_KEY = "roundtrip-key"
TRANSCRIPTS = ["blue sky", "green tree", "red apple", "white snow"]
RATE = 16_000
STEPS = 40
PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json")


def _cli(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    proc = run_swiftcore(*args, timeout=timeout, env=user_env())
    assert proc.returncode == 0, f"swiftcore {' '.join(args[:1])} failed:\n{proc.stderr[-3000:]}"
    return proc


def _clip(index: int) -> bytes:
    """Clip ``index`` as 16-bit mono WAV bytes: half a second of a tone, a chirp or a square wave."""
    t = np.arange(RATE // 2) / RATE
    wave_form = [
        np.sin(2 * np.pi * 300 * t),
        np.sin(2 * np.pi * 2400 * t),
        np.sin(2 * np.pi * (200 * t + 3000 * t * t)),  # rising chirp
        0.5 * np.sign(np.sin(2 * np.pi * 900 * t)),
    ][index]
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(RATE)
        out.writeframes((0.4 * wave_form * 32767).astype(np.int16).tobytes())
    return buffer.getvalue()


def _rows(clips: list[Path]) -> list[dict[str, Any]]:
    rows = []
    for i, (clip, text) in enumerate(zip(clips, TRANSCRIPTS, strict=True)):
        reply = {"role": "assistant", "content": f"language English<asr_text>{text}"}
        if i % 2:  # ms-swift style: an <audio> tag and the audios column
            rows.append({"messages": [{"role": "user", "content": "<audio>"}, reply], "audios": [str(clip)]})
        else:
            rows.append({"messages": [{"role": "user", "content": [{"type": "audio", "audio": str(clip)}]}, reply]})
    return rows


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("roundtrip-qwen3_asr")
    clips = []
    for i in range(len(TRANSCRIPTS)):
        clips.append(work / f"clip{i}.wav")
        clips[-1].write_bytes(_clip(i))
    (work / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _rows(clips)), encoding="utf-8")
    return work


@pytest.fixture(scope="module")
def trained(work: Path) -> Path:
    """The tiny Qwen3-ASR fully fine-tuned until it has memorised the four transcripts; its last checkpoint."""
    _cli("make-tiny", "qwen3_asr", str(work / "tiny"))
    _cli(
        "train",
        "--model",
        str(work / "tiny"),
        "--dataset",
        str(work / "train.jsonl"),
        "--tuner",
        "full",
        "--learning-rate",
        "3e-3",
        "--lr-scheduler",
        "cosine",
        "--batch-size",
        "4",
        "--max-steps",
        str(STEPS),
        "--save-steps",
        str(STEPS),
        "--logging-steps",
        "10",
        "--max-length",
        "256",
        "--no-plot",
        "--output-dir",
        str(work / "run"),
    )
    losses = [
        json.loads(line)["loss"]
        for line in (work / "run" / "logs.jsonl").read_text().splitlines()
        if "loss" in json.loads(line)
    ]
    assert losses[-1] < 0.05 < losses[0], f"qwen3_asr did not memorise the transcripts: losses {losses}"
    checkpoint = work / "run" / f"checkpoint-{STEPS}"
    missing = [
        name for name in PROCESSOR_FILES if (work / "tiny" / name).is_file() and not (checkpoint / name).is_file()
    ]
    assert not missing, (
        f"{checkpoint} lacks the base model's {missing}: without them no audio can be served from the trained "
        "checkpoint (swiftcore train must write swiftcore_media.processor_files(model) into each checkpoint)"
    )
    return checkpoint


def test_the_checkpoint_is_one_plain_transformers_loads(trained: Path, work: Path, full_checkpoint_loads_plainly: Any
                                                        ) -> None:
    full_checkpoint_loads_plainly("qwen3_asr", trained, work / "tiny")

def test_infer_cli_transcribes_what_was_trained(trained: Path, work: Path, tmp_path: Path) -> None:
    # The training file itself: each row is asked without its assistant turn, which is kept as "labels".
    _cli(
        "infer",
        "--model",
        str(trained),
        "--input",
        str(work / "train.jsonl"),
        "--output",
        str(tmp_path / "answers.jsonl"),
        "--max-new-tokens",
        "32",
    )
    rows = [json.loads(line) for line in (tmp_path / "answers.jsonl").read_text().splitlines()]
    assert [row.get("error") for row in rows] == [None] * len(TRANSCRIPTS)
    assert [row["response"] for row in rows] == TRANSCRIPTS
    assert [row["labels"] for row in rows] == [f"language English<asr_text>{t}" for t in TRANSCRIPTS]
    # One clip from the command line.
    proc = _cli("infer", "--model", str(trained), "--audio", str(work / "clip2.wav"), "--max-new-tokens", "32")
    assert json.loads(proc.stdout.strip().splitlines()[-1])["response"] == TRANSCRIPTS[2]


@pytest.fixture(scope="module")
def served(trained: Path) -> Iterator[Any]:
    """``swiftcore deploy`` of the trained checkpoint; an ``openai`` client for it."""
    env = user_env(SWIFTCORE_API_KEY=API_KEY)
    with deploy_process("--model", str(trained), served_model_name="asr", env=env) as (base, _):
        yield openai.OpenAI(base_url=f"{base}/v1", api_key=API_KEY, max_retries=0, timeout=120)


def _audio_message(work: Path, index: int) -> list[dict[str, Any]]:
    data = base64.b64encode((work / f"clip{index}.wav").read_bytes()).decode("ascii")
    return [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": data, "format": "wav"}}]}]


def test_deploy_transcribes_what_was_trained(served: Any, work: Path) -> None:
    for index, transcript in enumerate(TRANSCRIPTS):
        reply = served.chat.completions.create(
            model="asr", messages=_audio_message(work, index), max_tokens=32, temperature=0
        )
        assert reply.choices[0].message.content == transcript, index
        assert reply.choices[0].finish_reason == "stop"
    streamed = "".join(
        chunk.choices[0].delta.content or ""
        for chunk in served.chat.completions.create(
            model="asr", messages=_audio_message(work, 3), max_tokens=32, temperature=0, stream=True
        )
        if chunk.choices
    )
    assert streamed.strip() == TRANSCRIPTS[3]


def test_deploy_refuses_what_it_cannot_hear(served: Any, work: Path) -> None:
    """An image for an audio-only model, and bytes that are no audio: 400s that name the part."""
    with pytest.raises(openai.BadRequestError, match=r"messages\[0\]\.content\[0\].*does not accept images"):
        served.chat.completions.create(
            model="asr",
            max_tokens=4,
            messages=[
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}]}
            ],
        )
    junk = base64.b64encode(b"this is not a wav file at all").decode()
    with pytest.raises(openai.BadRequestError, match=r"messages\[0\]\.content\[0\] \(input_audio\): .*as audio"):
        served.chat.completions.create(
            model="asr",
            max_tokens=4,
            messages=[
                {"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": junk, "format": "wav"}}]}
            ],
        )


def test_audio_transcriptions_api_transcribes_what_was_trained(served: Any, work: Path) -> None:
    """OpenAI's audio API (``client.audio.transcriptions.create``, a multipart upload) gives each trained clip's
    transcript, as json and as text; a file that is no audio is a 400."""
    for index, transcript in enumerate(TRANSCRIPTS):
        with (work / f"clip{index}.wav").open("rb") as clip:
            result = served.audio.transcriptions.create(model="asr", file=clip, temperature=0)
        assert result.text == transcript, index
    with (work / "clip1.wav").open("rb") as clip:
        text = served.audio.transcriptions.create(model="asr", file=clip, response_format="text", temperature=0)
    assert text.strip() == TRANSCRIPTS[1]
    with pytest.raises(openai.BadRequestError, match="as audio"):
        served.audio.transcriptions.create(model="asr", file=("junk.wav", b"this is not a wav file at all"))
