"""``--teacher-server`` with images (issue 51, point 3): a teacher served by ``swiftcore deploy`` scores the student's
tokens after a multimodal prompt.

A row with an image goes to ``/v1/chat/completions`` as its conversation, the image an OpenAI ``image_url`` part with
a ``data:`` URL, with the student's ids in ``completion_token_ids``, ``max_tokens: 0`` and ``logprobs: true``
(:mod:`swiftcore_recipe_rl.teacher_server`). On the tiny random Qwen3.5 (its vision tower included), the log-probs the
server returns equal those of the same checkpoint run offline on the row's training sample (training's sample path:
``encode_records`` with the family's media preparer, then one forward with the pixel values) to 1e-4, for the reply's
own tokens and for seeded random ones; with another image, or none, they differ: the image reached the teacher.
In a run with image prompts each row is sent its own record (rows with the same text and other images too), and
``swiftcore train --recipe opd --teacher-server`` on image prompts, with the student's own checkpoint served, starts
at a reverse KL of 0. Refusals: a server without the extension, one that generates instead of scoring, media the
served model does not take (audio for Qwen3.5), a video, a decoded waveform, and a student prompt the server encodes
otherwise, are each one error naming ``--teacher-server``.

The server: ``swiftcore deploy --dtype float32`` of the checkpoint (a subprocess, one per module), whose chat route
has the ``completion_token_ids`` extension. A server without it, and one that generates instead of scoring, are small
FastAPI apps answering as such a server does.
"""

from __future__ import annotations

import base64
import json
import wave
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")
Image = pytest.importorskip("PIL.Image")

QUESTION = "What colour is this?"
KWARGS = {"chat_template_kwargs": {"enable_thinking": False}}


def _png(path: Path, seed: int) -> Path:
    Image.fromarray((np.random.RandomState(seed).rand(32, 32, 3) * 255).astype(np.uint8)).save(path)
    return path


def _record(image: Path | None, reply: str | None = None) -> dict[str, Any]:
    """The row: one user turn with the image (when given) and the question; ``reply``: the assistant's answer too."""
    content: list[dict[str, Any]] = [{"type": "image", "image": str(image)}] if image else []
    messages = [{"role": "user", "content": [*content, {"type": "text", "text": QUESTION}]}]
    if reply is not None:
        messages.append({"role": "assistant", "content": reply})
    return {"messages": messages, **KWARGS}


@contextmanager
def _served(model_dir: Path) -> Iterator[str]:
    """``model_dir`` served by ``swiftcore deploy`` (float32, as the offline teacher runs)."""
    from swiftcore_testing import deploy_process, user_env

    args = ("--model", str(model_dir), "--dtype", "float32", "--no-api-key")
    with deploy_process(*args, env=user_env(OMP_NUM_THREADS="1")) as (url, _):
        yield url


@pytest.fixture(scope="module")
def teacher_url(tiny_dir: Path) -> Iterator[str]:
    """The tiny Qwen3.5 (images) served for the module (:func:`_served`)."""
    with _served(tiny_dir) as url:
        yield url


@pytest.fixture(scope="module")
def offline(tiny_dir: Path, plugins: Any) -> Any:
    """The same checkpoint loaded in this process (float32), to run rows offline."""
    from swiftcore_infer import TransformersEngine

    return TransformersEngine(tiny_dir, plugins, dtype="float32", device="cpu")


def training_sample(offline: Any, record: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """``record`` (with its reply) as training encodes it: the collated batch of its one sample (ids, mask, media
    tensors) and the index of its first trained token (where the prompt ends)."""
    from swiftcore_train import encode_records

    cfg = SimpleNamespace(loss_policy="all_assistant", max_length=4096, truncation="error", enable_thinking=None)
    preparer = offline.media_preparer()
    [sample] = encode_records([record], offline.template, offline.tokenizer, cfg, media=preparer)
    first = next(i for i, label in enumerate(sample["labels"]) if label != -100)
    return preparer.collate([sample]), first


def offline_logps(offline: Any, batch: dict[str, Any], first: int, completion: list[int]) -> list[float]:
    """The offline teacher's log-probs of ``completion`` after the sample's prompt (its first ``first`` tokens), the
    media tensors of the sample given to the forward: ``log_softmax`` of the raw logits, as the server scores."""
    media = {k: v for k, v in batch.items() if k not in ("input_ids", "labels", "attention_mask", "mm_token_type_ids")}
    ids = torch.tensor([batch["input_ids"][0, :first].tolist() + completion])
    inputs = {**media, "input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if "mm_token_type_ids" in batch:
        types = batch["mm_token_type_ids"][0, :first].tolist() + [0] * len(completion)
        inputs["mm_token_type_ids"] = torch.tensor([types])
    with torch.inference_mode():
        logits = offline.model(**inputs).logits[0, first - 1 : -1].float()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(completion)[:, None])[:, 0].tolist()


def test_served_logps_of_an_image_row_equal_the_offline_teacher_s(
    teacher_url: str, offline: Any, tmp_path: Path
) -> None:
    from swiftcore_recipe_rl.teacher_server import TeacherServer

    image = _png(tmp_path / "row.png", seed=0)
    batch, first = training_sample(offline, _record(image, reply="red, a warm colour"))
    prompt = batch["input_ids"][0, :first].tolist()
    reply = batch["input_ids"][0, first:].tolist()  # the reply's own tokens, as training tokenises them
    random_ids = torch.randint(0, 256, (6,), generator=torch.Generator().manual_seed(0)).tolist()  # any ids
    assert "pixel_values" in batch  # the sample carries the image
    server = TeacherServer(teacher_url)
    try:
        row = _record(image)
        # prompts: the server's encoded prompt is checked against the training sample's (refused when they differ)
        got = server.record_logps([row, row], [reply, random_ids], prompts=[prompt, prompt])
        want = [offline_logps(offline, batch, first, reply), offline_logps(offline, batch, first, random_ids)]
        diff = max(abs(a - b) for g, w in zip(got, want, strict=True) for a, b in zip(g, w, strict=True))
        print(f"image row, served vs offline: max |diff| {diff:.2e} over {len(reply) + len(random_ids)} tokens "
              f"({first} prompt tokens)")  # fmt: skip
        assert [len(g) for g in got] == [len(reply), len(random_ids)]
        assert diff < 1e-4
        assert float(np.std(want[1])) > 0.1  # real, varied log-probs

        # The image reached the teacher: another image, or none, and the same tokens score otherwise.
        other = _png(tmp_path / "other.png", seed=1)
        [swapped, plain] = server.record_logps([_record(other), _record(None)], [random_ids, random_ids])
        moved = max(abs(a - b) for a, b in zip(swapped, got[1], strict=True))
        gone = max(abs(a - b) for a, b in zip(plain, got[1], strict=True))
        print(f"another image moves the served log-probs by up to {moved:.2e}, no image by {gone:.2e}")
        assert moved > 1e-3 and gone > 1e-3
        other_batch, other_first = training_sample(offline, _record(other, reply="red, a warm colour"))
        offline_swapped = offline_logps(offline, other_batch, other_first, random_ids)
        assert max(abs(a - b) for a, b in zip(swapped, offline_swapped, strict=True)) < 1e-4
    finally:
        server.close()


def test_a_batch_mixing_image_and_text_rows_is_scored_row_by_row(
    teacher_url: str, offline: Any, tmp_path: Path
) -> None:
    """``completion_logps`` on a generation batch (TRL's layout: prompts left-padded, completions right-padded) whose
    first row has an image and second is text: the image row goes by chat with its record, the text row as token ids;
    each equals the offline teacher, and nothing is written past a completion's mask."""
    from swiftcore_recipe_rl.teacher_server import TeacherServer

    image = _png(tmp_path / "row.png", seed=0)
    batch, first = training_sample(offline, _record(image, reply="red"))
    text_batch, text_first = training_sample(offline, _record(None, reply="red"))
    prompts = [batch["input_ids"][0, :first].tolist(), text_batch["input_ids"][0, :text_first].tolist()]
    completions = [[11, 40, 7, 99], [5, 60]]
    width = max(map(len, prompts))
    out = {
        "prompt_ids": torch.tensor([[0] * (width - len(p)) + p for p in prompts]),
        "prompt_mask": torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts]),
        "completion_ids": torch.tensor([c + [0] * (4 - len(c)) for c in completions]),
        "completion_mask": torch.tensor([[1] * len(c) + [0] * (4 - len(c)) for c in completions]),
        "pixel_values": batch["pixel_values"],  # as a multimodal batch carries it
    }
    server = TeacherServer(teacher_url)
    try:
        got = server.completion_logps(out, [_record(image), _record(None)])
    finally:
        server.close()
    want = [
        offline_logps(offline, batch, first, completions[0]),
        offline_logps(offline, text_batch, text_first, [5, 60]),
    ]
    assert got.shape == (2, 4) and got.dtype == torch.float32
    assert torch.allclose(got[0], torch.tensor(want[0]), atol=1e-4)
    assert torch.allclose(got[1, :2], torch.tensor(want[1]), atol=1e-4)
    assert not got[1, 2:].any()


class _Generating:
    """What ``attach_teacher_server`` needs of the ``opd`` trainer: the generation step that calls ``teacher_logps``
    on its batch (as ``SwiftOPDTrainer.distillation_advantages`` does), here each row ``prompt`` then ``completion``."""

    def __init__(self, prompt: list[int], completion: list[int]) -> None:
        self.prompt, self.completion = prompt, completion

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> Any:
        rows, prompt, completion = len(inputs), self.prompt, self.completion
        out = {
            "prompt_ids": torch.tensor([prompt] * rows),
            "prompt_mask": torch.ones(rows, len(prompt), dtype=torch.long),
            "completion_ids": torch.tensor([completion] * rows),
            "completion_mask": torch.ones(rows, len(completion), dtype=torch.long),
        }
        return self.teacher_logps(out)  # type: ignore[attr-defined]  # attach_teacher_server sets it


def test_attach_keeps_each_generation_batch_s_records(teacher_url: str, offline: Any, tmp_path: Path) -> None:
    """``attach_teacher_server(trainer, url, records)``: the rows of the batch being generated (TRL's ``inputs``, by
    their ``prompt`` text) are the records the teacher is sent, so an image row is scored with its image."""
    from swiftcore_recipe_rl.teacher_server import attach_teacher_server

    image = _png(tmp_path / "row.png", seed=0)
    batch, first = training_sample(offline, _record(image, reply="red"))
    prompt = batch["input_ids"][0, :first].tolist()
    completion = [11, 40, 7]

    trainer = _Generating(prompt, completion)
    server = attach_teacher_server(trainer, teacher_url, records={"with image": _record(image)})
    try:
        got = trainer._generate_and_score_completions([{"prompt": "with image"}] * 2)
    finally:
        server.close()
    want = torch.tensor(offline_logps(offline, batch, first, completion))
    assert torch.allclose(got, want.expand(2, -1), atol=1e-4)


def test_an_image_run_sends_each_row_its_own_record(teacher_url: str, offline: Any, tmp_path: Path) -> None:
    """With image prompts (``media``: the plan's entries, one per dataset row) a row is found by its media column, not
    its prompt text: two rows with the same text and different images are each scored with their own image (by text
    alone, both were sent the first)."""
    from swiftcore_recipe_rl.prompts import MEDIA_COLUMN
    from swiftcore_recipe_rl.teacher_server import attach_teacher_server

    images = [_png(tmp_path / f"row-{seed}.png", seed=seed) for seed in (0, 1)]
    samples = [training_sample(offline, _record(image, reply="red")) for image in images]
    (batch, first), (other, other_first) = samples
    prompt = batch["input_ids"][0, :first].tolist()
    assert other["input_ids"][0, :other_first].tolist() == prompt  # the same ids: only the pixels tell them apart
    completion = [11, 40, 7]

    trainer = _Generating(prompt, completion)
    media = [{"prompt_record": _record(image)} for image in images]
    server = attach_teacher_server(trainer, teacher_url, records={"same text": _record(images[0])}, media=media)
    try:
        got = trainer._generate_and_score_completions([{"prompt": "same text", MEDIA_COLUMN: i} for i in (0, 1)])
    finally:
        server.close()
    want = [torch.tensor(offline_logps(offline, b, f, completion)) for b, f in samples]
    assert not torch.allclose(want[0], want[1], atol=1e-3)  # the images score the reply differently
    assert torch.allclose(got[0], want[0], atol=1e-4) and torch.allclose(got[1], want[1], atol=1e-4)


def test_opd_on_image_prompts_scores_with_the_served_teacher(teacher_url: str, tiny_dir: Path, tmp_path: Path) -> None:
    """``swiftcore train --recipe opd --teacher-server URL`` on image prompts (two rows with the same question and
    different images), the served teacher being the student's own checkpoint: with each row's image seen by both, the
    first step's reverse KL is 0 (measured -1.2e-7; with each row looked up by its prompt text, as before, both rows
    were sent the second row's image and it was 0.060)."""
    from swiftcore_testing import run_cli

    rows = [
        {"prompt": [{"role": "user", "content": [{"type": "image", "image": str(_png(tmp_path / f"{i}.png", i))},
                                                 {"type": "text", "text": QUESTION}]}]}
        for i in (0, 1)
    ]  # fmt: skip
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "opd"
    run_cli("train", "--recipe", "opd", "--model", str(tiny_dir), "--teacher-server", teacher_url, "--dataset",
            str(data), "--disable-thinking", "--tuner", "lora", "--num-generations", "2", "--max-completion-length",
            "3", "--batch-size", "2", "--max-steps", "1", "--logging-steps", "1", "--seed", "0", "--no-plot",
            "--output-dir", str(out))  # fmt: skip
    logs = [json.loads(line) for line in (out / "logs.jsonl").read_text().splitlines()]
    [kl] = [row["opd/reverse_kl"] for row in logs if "opd/reverse_kl" in row]
    print(f"opd on image prompts, served teacher = the student: reverse KL of step 1 {kl:.2e}")
    assert abs(kl) < 1e-4


# ------------------------------------------------------------------------------------------ refusals


def _plain_chat_server() -> Any:
    """A server without the chat scoring extension (an older ``swiftcore deploy``, or vLLM): it lists one model,
    scores token-id prompts with ``/v1/completions`` ``echo`` (constant log-probs here), and refuses ``max_tokens: 0``
    on the chat route with a 400 naming the field."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    app = FastAPI()

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": "plain", "object": "model"}]}

    @app.post("/v1/completions")
    def completions(body: dict[str, Any]) -> dict[str, Any]:
        rows = [{"index": i, "logprobs": {"token_logprobs": [None] + [-1.0] * (len(p) - 1)}}
                for i, p in enumerate(body["prompt"])]  # fmt: skip
        return {"choices": rows}

    @app.post("/v1/chat/completions")
    def chat(body: dict[str, Any]) -> Any:
        error = {"message": "max_tokens must be at least 1", "type": "invalid_request_error", "param": "max_tokens"}
        return JSONResponse({"error": {**error, "code": None}}, status_code=400)

    return app


def test_a_server_without_the_extension_is_one_error_naming_the_option(tmp_path: Path) -> None:
    """A server without ``completion_token_ids``: its 400 for ``max_tokens: 0`` becomes one error saying what the
    server lacks."""
    from swiftcore_recipe_rl.teacher_server import TeacherServer, attach_teacher_server
    from swiftcore_testing import ServerThread

    from swiftcore.api import SwiftcoreError

    with ServerThread(_plain_chat_server()) as url:
        server = TeacherServer(url)
        with pytest.raises(SwiftcoreError, match=r"--teacher-server .*: row 0 .*cannot score a given reply after a "
                           r"chat prompt .*'completion_token_ids'.*or use --teacher-model"):  # fmt: skip
            server.record_logps([_record(_png(tmp_path / "a.png", 0))], [[1, 2]])
        server.close()
        # attach checks it before training when a prompt has media (and not for text-only prompts)
        records = {"with image": _record(_png(tmp_path / "b.png", 1))}
        with pytest.raises(SwiftcoreError, match=r"--teacher-server .*: the check: .*cannot score a given reply"):
            attach_teacher_server(SimpleNamespace(_generate_and_score_completions=None), url, records=records)
        attach_teacher_server(
            SimpleNamespace(_generate_and_score_completions=None), url, records={"t": _record(None)}
        ).close()


def test_a_server_that_generates_instead_of_scoring_is_one_error_naming_the_option(tmp_path: Path) -> None:
    """A chat server that ignores the extension and answers a reply of its own (with its log-probs)."""
    from fastapi import FastAPI
    from swiftcore_recipe_rl.teacher_server import TeacherServer
    from swiftcore_testing import ServerThread

    from swiftcore.api import SwiftcoreError

    app = FastAPI()

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": "plain", "object": "model"}]}

    @app.post("/v1/chat/completions")
    def chat(body: dict[str, Any]) -> dict[str, Any]:
        content = [{"token": "x", "logprob": -1.0, "bytes": [120], "top_logprobs": []}] * 2
        return {"choices": [{"index": 0, "message": {"content": "xx"}, "logprobs": {"content": content}}]}

    with ServerThread(app) as url:
        server = TeacherServer(url)
        with pytest.raises(SwiftcoreError, match=r"--teacher-server .*asked to score the 3 given tokens, got 2 "
                           r"tokens' log-probs: the server generated a reply of its own"):  # fmt: skip
            server.record_logps([_record(_png(tmp_path / "a.png", 0))], [[1, 2, 3]])
        server.close()


def _wav(path: Path) -> Path:
    rate = 16_000
    samples = (0.4 * np.sin(2 * np.pi * 440 * np.arange(rate // 4) / rate) * 32767).astype(np.int16)
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(samples.tobytes())
    return path


def test_media_the_teacher_cannot_take_is_one_error_naming_the_option(teacher_url: str, tmp_path: Path) -> None:
    """Audio for the Qwen3.5 teacher (it takes images only): the server's 400 naming the part, as one error naming
    ``--teacher-server`` and the row; a video or a decoded waveform is refused before any request."""
    from swiftcore_recipe_rl.teacher_server import TeacherServer, chat_request

    from swiftcore.api import SwiftcoreError

    clip = _wav(tmp_path / "clip.wav")
    row = {"messages": [{"role": "user", "content": [{"type": "audio", "audio": str(clip)}, {"type": "text",
           "text": "What is this?"}]}], **KWARGS}  # fmt: skip
    sent = chat_request(row)["messages"][0]["content"][0]
    assert sent["type"] == "input_audio" and sent["input_audio"]["format"] == "wav"
    assert base64.b64decode(sent["input_audio"]["data"]) == clip.read_bytes()
    server = TeacherServer(teacher_url)
    try:
        with pytest.raises(SwiftcoreError, match=r"--teacher-server .*: row 0 .*answered 400: .*messages\[0\]"
                           r"\.content\[0\].*does not accept audio"):  # fmt: skip
            server.record_logps([row], [[1, 2]])
    finally:
        server.close()
    video = {"messages": [{"role": "user", "content": [{"type": "video", "video": "v.mp4"}]}]}
    with pytest.raises(SwiftcoreError, match=r"--teacher-server: messages\[0\]\.content\[0\] \(video\): .*images and "
                       "audio only"):  # fmt: skip
        chat_request(video)
    waveform = {"messages": [{"role": "user", "content": [{"type": "audio", "audio": {"array": [0.0] * 8,
                "sampling_rate": 16_000}}]}]}  # fmt: skip
    with pytest.raises(SwiftcoreError, match=r"--teacher-server: messages\[0\]\.content\[0\] \(audio\): a decoded "
                       "waveform"):  # fmt: skip
        chat_request(waveform)


def test_tags_and_columns_become_openai_parts(tmp_path: Path) -> None:
    """``<image>`` tags with an ``images`` column (ms-swift's row shape) are sent as ``image_url`` data URLs of the
    files' bytes, in order, the text around them kept; a tag with no item left is refused, naming the part."""
    from swiftcore_recipe_rl.teacher_server import chat_request

    from swiftcore.api import SwiftcoreError

    first, second = _png(tmp_path / "a.png", 0), _png(tmp_path / "b.png", 1)
    row = {"messages": [{"role": "user", "content": "<image>left, <image>right: same?"}],
           "images": [str(first), str(second)], **KWARGS}  # fmt: skip
    body = chat_request(row)
    parts = body["messages"][0]["content"]
    assert [p["type"] for p in parts] == ["image_url", "text", "image_url", "text"]
    for part, path in ((parts[0], first), (parts[2], second)):
        header, _, data = part["image_url"]["url"].partition(",")
        assert header == "data:image/png;base64" and base64.b64decode(data) == path.read_bytes()
    assert body["chat_template_kwargs"] == {"enable_thinking": False} and "images" not in body
    with pytest.raises(SwiftcoreError, match=r"messages\[0\]\.content\[2\] \(image\) has no value and the record's "
                       "'images' column has no item left"):  # fmt: skip
        chat_request({**row, "images": [str(first)]})


def test_a_student_prompt_the_server_encodes_otherwise_is_refused(
    teacher_url: str, offline: Any, tmp_path: Path
) -> None:
    """The server returns the prompt it encoded; a student whose prompt ids differ (another template or processor)
    would be scored after another context, and is refused naming the first differing token."""
    from swiftcore_recipe_rl.teacher_server import TeacherServer

    from swiftcore.api import SwiftcoreError

    image = _png(tmp_path / "row.png", seed=0)
    batch, first = training_sample(offline, _record(image, reply="red"))
    prompt = batch["input_ids"][0, :first].tolist()
    server = TeacherServer(teacher_url)
    try:
        with pytest.raises(SwiftcoreError, match=rf"--teacher-server .*: row 0 .*the server encoded the prompt as "
                           rf"{first} tokens, the student's has {first - 1} .*student's chat template"):  # fmt: skip
            server.record_logps([_record(image)], [[1, 2]], prompts=[prompt[:-1]])
    finally:
        server.close()


# ------------------------------------------------------------------------------------------ audio (Gemma 4)


def _tone(path: Path, freq: float) -> Path:
    """A quarter-second 16 kHz mono WAV tone."""
    rate = 16_000
    samples = (0.4 * np.sin(2 * np.pi * freq * np.arange(rate // 4) / rate) * 32767).astype(np.int16)
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(samples.tobytes())
    return path


@pytest.fixture(scope="module")
def gemma(tiny_model_dir: Any, plugins: Any) -> Iterator[tuple[str, Any]]:
    """The tiny Gemma 4 (images and audio) served for the module, and the same checkpoint loaded offline."""
    from swiftcore_infer import TransformersEngine

    model_dir = tiny_model_dir("gemma4")
    with _served(model_dir) as url:
        yield url, TransformersEngine(model_dir, plugins, dtype="float32", device="cpu")


def test_served_logps_of_an_image_and_audio_row_equal_the_offline_teacher_s(gemma: Any, tmp_path: Path) -> None:
    """A Gemma 4 row with an image and a clip (sent as ``image_url`` and ``input_audio``): the served log-probs equal
    the offline teacher's on the row's training sample; another clip moves them."""
    from swiftcore_recipe_rl.teacher_server import TeacherServer

    url, offline = gemma
    image, clip = _png(tmp_path / "row.png", seed=0), _tone(tmp_path / "row.wav", 300.0)

    def row(audio: Path, reply: str | None = None) -> dict[str, Any]:
        content = [{"type": "image", "image": str(image)}, {"type": "audio", "audio": str(audio)}]
        messages = [{"role": "user", "content": [*content, {"type": "text", "text": "What do you see and hear?"}]}]
        if reply is not None:
            messages.append({"role": "assistant", "content": reply})
        return {"messages": messages, **KWARGS}

    batch, first = training_sample(offline, row(clip, reply="a red tone"))
    assert "pixel_values" in batch and "input_features" in batch  # the sample carries both
    prompt = batch["input_ids"][0, :first].tolist()
    reply = batch["input_ids"][0, first:].tolist()
    random_ids = torch.randint(0, 256, (6,), generator=torch.Generator().manual_seed(0)).tolist()
    server = TeacherServer(url)
    try:
        got = server.record_logps([row(clip), row(clip)], [reply, random_ids], prompts=[prompt, prompt])
        want = [offline_logps(offline, batch, first, reply), offline_logps(offline, batch, first, random_ids)]
        diff = max(abs(a - b) for g, w in zip(got, want, strict=True) for a, b in zip(g, w, strict=True))
        print(f"image+audio row (gemma4), served vs offline: max |diff| {diff:.2e} over {len(reply) + 6} tokens "
              f"({first} prompt tokens)")  # fmt: skip
        assert diff < 1e-4
        [other] = server.record_logps([row(_tone(tmp_path / "other.wav", 2400.0))], [random_ids])
        moved = max(abs(a - b) for a, b in zip(other, got[1], strict=True))
        print(f"another clip moves the served log-probs by up to {moved:.2e}")
        assert moved > 1e-4
    finally:
        server.close()
