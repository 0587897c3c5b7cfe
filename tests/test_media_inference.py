"""Images and audio at inference: the served prompt is training's sample, and bad media is a clear 400.

Per media family (Qwen3.5 image, Gemma 4 image, audio and both, Qwen3-ASR audio), one chat request with
OpenAI content parts (``image_url`` data URL, ``input_audio``) goes through the real HTTP app over the
transformers engine (fp32). Asserted against training's own sample path (``swiftcore_train.run.encode_records``
with the family's :class:`~swiftcore_media.MediaPreparer`, then ``collate``) for the same record:

- the prompt ids the engine encoded equal the training sample's ids up to its first trained token;
- each media tensor equals the training batch's (exactly);
- the logits of the served request's first step (the prefill forward inside ``generate``) equal a direct
  forward of the model on the training batch cut at that token (max |diff| <= 1e-5), and the greedy first
  token is the same.

Then each bad-media case is a 400 whose message names the part: remote URLs, local paths, not an image or
audio, truncated files, bad base64 or format, media the model does not take, a backend that cannot feed it.
"""

from __future__ import annotations

import base64
import io
import wave
from types import SimpleNamespace
from typing import Any

import pytest

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")
pytest.importorskip("fastapi")
Image = pytest.importorskip("PIL.Image")

RATE = 16_000


def _png(seed: int = 0, size: int = 32) -> bytes:
    pixels = (np.random.RandomState(seed).rand(size, size, 3) * 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def _wav(freq: float = 440.0, seconds: float = 0.5) -> bytes:
    t = np.arange(int(RATE * seconds)) / RATE
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(RATE)
        out.writeframes((0.4 * np.sin(2 * np.pi * freq * t) * 32767).astype(np.int16).tobytes())
    return buffer.getvalue()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _image_url(data: bytes) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": "data:image/png;base64," + _b64(data)}}


def _input_audio(data: bytes, fmt: str = "wav") -> dict[str, Any]:
    return {"type": "input_audio", "input_audio": {"data": _b64(data), "format": fmt}}


@pytest.fixture(scope="module")
def plugins() -> Any:
    from swiftcore._plugins import load_plugins

    return load_plugins(env={})


_ENGINES: dict[str, Any] = {}


@pytest.fixture(scope="module")
def engine_for(plugins: Any, tiny_model_dir: Any) -> Any:
    from swiftcore_infer.transformers_engine import TransformersEngine

    def get(family: str) -> Any:
        if family not in _ENGINES:
            _ENGINES[family] = TransformersEngine(tiny_model_dir(family), plugins, dtype="float32", device="cpu")
        return _ENGINES[family]

    yield get
    _ENGINES.clear()


def _client(engine: Any) -> Any:
    from fastapi.testclient import TestClient
    from swiftcore_serve import ServerConfig, build_app

    return TestClient(build_app(engine, ServerConfig(model_name="m")))


# (family, the media of the question: (training part, OpenAI part) pairs)
CASES = {
    "qwen3_5-image": ("qwen3_5", ["image"]),
    "gemma4-image": ("gemma4", ["image"]),
    "gemma4-audio": ("gemma4", ["audio"]),
    "gemma4-image+audio": ("gemma4", ["image", "audio"]),
    "qwen3_asr-audio": ("qwen3_asr", ["audio"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_served_prompt_is_the_training_sample(case: str, engine_for: Any, tmp_path: Any) -> None:
    from swiftcore_train.run import encode_records

    family, kinds = CASES[case]
    engine = engine_for(family)
    image, audio = tmp_path / "picture.png", tmp_path / "clip.wav"
    image.write_bytes(_png())
    audio.write_bytes(_wav())
    train_parts = [{"type": kind, kind: str(image if kind == "image" else audio)} for kind in kinds]
    api_parts = [
        _image_url(image.read_bytes()) if kind == "image" else _input_audio(audio.read_bytes()) for kind in kinds
    ]
    text = [{"type": "text", "text": "What is this?"}]
    kwargs = {"chat_template_kwargs": {"enable_thinking": False}}
    record = {
        "messages": [{"role": "user", "content": train_parts + text}, {"role": "assistant", "content": "a test"}],
        **kwargs,
    }

    # Training's sample path: encode_records (tags -> parts, template, the preparer's lazy expand), then collate.
    cfg = SimpleNamespace(loss_policy="all_assistant", max_length=4096, truncation="error", enable_thinking=None)
    preparer = engine.media_preparer()
    [sample] = encode_records([record], engine.template, engine.tokenizer, cfg, media=preparer)
    batch = preparer.collate([sample])
    first = next(i for i, label in enumerate(sample["labels"]) if label != -100)

    # The served request, with the prompt the engine encoded and the prefill logits of its generate call.
    seen: dict[str, Any] = {}
    encode = engine.encode

    def spy_encode(request: Any) -> Any:
        seen["prompt"] = encode(request)
        return seen["prompt"]

    def first_forward(module: Any, args: Any, out: Any) -> None:
        seen.setdefault("logits", out.logits[0, -1].detach().clone())

    engine.encode = spy_encode
    hook = engine.model.register_forward_hook(first_forward)
    try:
        with _client(engine) as client:
            answer = client.post(
                "/v1/chat/completions",
                json={
                    "model": "m",
                    "max_tokens": 1,
                    "temperature": 0,
                    "messages": [{"role": "user", "content": api_parts + text}],
                    **kwargs,
                },
            )
    finally:
        del engine.encode
        hook.remove()
    assert answer.status_code == 200, answer.text

    prompt = seen["prompt"]
    assert list(prompt) == sample["input_ids"][:first]
    tensors = {
        k: v for k, v in batch.items() if k not in ("input_ids", "labels", "attention_mask", "mm_token_type_ids")
    }
    assert tensors and set(prompt.media) - {"mm_token_type_ids"} == set(tensors)
    for key, tensor in tensors.items():
        assert torch.equal(torch.as_tensor(prompt.media[key]), tensor), key
    if "mm_token_type_ids" in batch:
        assert list(prompt.media["mm_token_type_ids"]) == batch["mm_token_type_ids"][0, :first].tolist()

    direct = {
        **tensors,
        "input_ids": batch["input_ids"][:, :first],
        "attention_mask": batch["attention_mask"][:, :first],
    }
    if "mm_token_type_ids" in batch:
        direct["mm_token_type_ids"] = batch["mm_token_type_ids"][:, :first]
    with torch.inference_mode():
        logits = engine.model(**direct).logits[0, -1]
    difference = (seen["logits"].float() - logits.float()).abs().max().item()
    print(f"{case}: {first} prompt tokens, media {sorted(tensors)}, max |logit diff| {difference:.2e}")
    assert difference <= 1e-5
    assert int(seen["logits"].argmax()) == int(logits.argmax())
    # Media changes the answer: the same question without it is a different prompt with other logits.
    assert len(prompt) > len(engine.encode(_text_only(kwargs)))


def _text_only(kwargs: dict[str, Any]) -> Any:
    from swiftcore_infer.types import Request

    return Request(record={"messages": [{"role": "user", "content": "What is this?"}], **kwargs})


def _post(client: Any, parts: list[dict[str, Any]], **extra: Any) -> Any:
    body = {"model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": parts}], **extra}
    return client.post("/v1/chat/completions", json=body)


def _error(response: Any) -> str:
    assert response.status_code == 400, (response.status_code, response.text)
    return response.json()["error"]["message"]


def test_bad_media_is_a_400_naming_the_part(engine_for: Any) -> None:
    png, wav = _png(), _wav()
    truncated_png = png[: len(png) // 2]
    header_only = wav[:44] + wav[44:1000]  # its header promises 8000 frames
    cases = [
        (
            [{"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}],
            r"messages[0].content[0] (image_url): remote media is off on this server",
        ),
        (
            [{"type": "image_url", "image_url": {"url": "/etc/passwd"}}],
            r"messages[0].content[0] (image_url): got a local file path; the API takes no local files",
        ),
        ([{"type": "image_url", "image_url": {"url": "file:///etc/hosts"}}], "takes no local files"),
        ([{"type": "image", "image": "cat.png"}], "messages[0].content[0] (image): got a local file path"),
        (
            [{"type": "text", "text": "look:"}, _image_url(b"GIF? no, just text")],
            "messages[0].content[1] (image_url): cannot read the 18 given bytes as an image",
        ),
        ([_image_url(truncated_png)], "messages[0].content[0] (image_url): cannot read the"),
        (
            [_input_audio(b"not audio at all")],
            "messages[0].content[0] (input_audio): cannot decode the 16 given bytes as audio",
        ),
        (
            [_input_audio(header_only)],
            "messages[0].content[0] (input_audio): truncated WAV: its header says 8000 frames",
        ),
        (
            [{"type": "input_audio", "input_audio": {"data": "***not base64***", "format": "wav"}}],
            "messages[0].content[0] (input_audio): the media data is not valid base64",
        ),
        (
            [{"type": "input_audio", "input_audio": {"data": _b64(wav), "format": "ogg"}}],
            "messages[0].content[0] (input_audio): format 'ogg' is not one of wav, mp3, flac",
        ),
        ([{"type": "input_audio", "input_audio": "AAAA"}], "messages[0].content[0] (input_audio): expected"),
        (
            [{"type": "image_url", "image_url": {"url": "data:image/png,rawbytes"}}],
            "a data URL must be data:<type>;base64",
        ),
        (
            [{"type": "video_url", "video_url": {"url": "data:video/mp4;base64,AAAA"}}],
            "messages[0].content[0] (video_url): model 'm' does not accept videos",
        ),
    ]
    with _client(engine_for("gemma4")) as client:
        for parts, expected in cases:
            message = _error(_post(client, parts))
            assert expected in message, (expected, message)
            # Streamed requests are refused the same way, before any stream starts.
            assert expected in _error(_post(client, parts, stream=True))
        # The server still answers good media after all that.
        assert _post(client, [_image_url(png), _input_audio(wav)]).status_code == 200
    with _client(engine_for("deepseek_v4")) as client:
        message = _error(_post(client, [_image_url(png)]))
        assert (
            "messages[0].content[0] (image_url): model 'm' does not accept images (it is a text-only model)" in message
        )
    with _client(engine_for("qwen3_5")) as client:
        message = _error(_post(client, [{"type": "text", "text": "hi"}, _input_audio(wav)]))
        assert "messages[0].content[1] (input_audio): model 'm' does not accept audio (it takes image only)" in message


def test_the_engine_refuses_media_it_cannot_take(engine_for: Any, tmp_path: Any, monkeypatch: Any) -> None:
    """Rows of ``swiftcore infer`` and Python callers get the same refusals, and a backend that cannot feed
    media tensors (vLLM, SGLang) refuses them instead of dropping them."""
    from swiftcore_infer.types import Request

    image = tmp_path / "p.png"
    image.write_bytes(_png())
    row = {"messages": [{"role": "user", "content": "<image>Describe."}], "images": [str(image)]}
    [text_only] = engine_for("deepseek_v4").generate_requests([Request(record=row)])
    assert text_only.error_status == 400
    assert "images[0]: model 'deepseek_v4' does not accept images" in text_only.error
    missing = {"messages": [{"role": "user", "content": [{"type": "image", "image": str(tmp_path / "gone.png")}]}]}
    [gone] = engine_for("qwen3_5").generate_requests([Request(record=missing)])
    assert (
        gone.error_status == 400 and "messages[0].content[0] (image): file" in gone.error and "not found" in gone.error
    )
    engine = engine_for("qwen3_5")
    monkeypatch.setattr(engine, "accepts_media", False)
    [refused] = engine.generate_requests([Request(record=row)])
    assert refused.error_status == 400
    assert "the transformers backend does not take images or audio yet" in refused.error
