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
Last, the server's media policy: files under ``--media-root`` only (no traversal, no symlink escape), URLs
only with ``--allow-remote-media`` (fetched from a real local HTTP server), and each server-side limit.
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
    from swiftcore_infer import TransformersEngine

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


# (family, the media of the question, the parts' media controls: swiftcore_media.controls)
CASES = {
    "qwen3_5-image": ("qwen3_5", ["image"], {}),
    "gemma4-image": ("gemma4", ["image"], {}),
    "gemma4-audio": ("gemma4", ["audio"], {}),
    "gemma4-image+audio": ("gemma4", ["image", "audio"], {}),
    "qwen3_asr-audio": ("qwen3_asr", ["audio"], {}),
    # A 128x128 image cut to 64x64, a 2 s clip cut to 1 s: fewer image / audio tokens than without the controls.
    "qwen3_5-image-max_pixels": ("qwen3_5", ["image"], {"max_pixels": 64 * 64}),
    "gemma4-image-max_pixels": ("gemma4", ["image"], {"max_pixels": 64 * 64}),
    "gemma4-audio-max_seconds": ("gemma4", ["audio"], {"max_seconds": 1.0}),
    "qwen3_asr-audio-max_seconds": ("qwen3_asr", ["audio"], {"max_seconds": 1.0}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_served_prompt_is_the_training_sample(case: str, engine_for: Any, tmp_path: Any) -> None:
    from swiftcore_train import encode_records

    family, kinds, controls = CASES[case]
    engine = engine_for(family)
    image, audio = tmp_path / "picture.png", tmp_path / "clip.wav"
    image.write_bytes(_png(size=128 if controls else 32))
    audio.write_bytes(_wav(seconds=2.0 if controls else 0.5))
    train_parts = [{"type": kind, kind: str(image if kind == "image" else audio), **controls} for kind in kinds]
    api_parts = [
        {**(_image_url(image.read_bytes()) if kind == "image" else _input_audio(audio.read_bytes())), **controls}
        for kind in kinds
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

    def spy_encode(request: Any, **kwargs: Any) -> Any:
        seen["prompt"] = encode(request, **kwargs)
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
    if controls:  # the controls took effect: the same media without them make a longer prompt or other tensors
        from swiftcore_infer import Request

        plain = [{"type": kind, kind: str(image if kind == "image" else audio)} for kind in kinds]
        uncut = engine.encode(Request(record={"messages": [{"role": "user", "content": plain + text}], **kwargs}))
        print(f"{case}: {len(prompt)} prompt tokens with {controls}, {len(uncut)} without")
        # Gemma 4's image processor always makes 280 soft tokens: a smaller image is the same length, other pixels.
        same = [torch.equal(torch.as_tensor(prompt.media[k]), torch.as_tensor(uncut.media[k])) for k in tensors]
        assert len(prompt) < len(uncut) or (len(prompt) == len(uncut) and not all(same))


def _text_only(kwargs: dict[str, Any]) -> Any:
    from swiftcore_infer import Request

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
        assert (
            "messages[0].content[1] (input_audio): model 'm' does not accept audio (it takes image, video only)"
            in message
        )


def test_the_engine_refuses_media_it_cannot_take(engine_for: Any, tmp_path: Any, monkeypatch: Any) -> None:
    """Rows of ``swiftcore infer`` and Python callers get the same refusals, and a backend that cannot feed
    media tensors (vLLM, SGLang) refuses them instead of dropping them."""
    from swiftcore_infer import Request

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


# --------------------------------------------------------------------------- the server's media policy


def _policy_client(engine: Any, **policy: Any) -> Any:
    from fastapi.testclient import TestClient
    from swiftcore_infer import MediaPolicy
    from swiftcore_serve import ServerConfig, build_app

    return TestClient(build_app(engine, ServerConfig(model_name="m", media=MediaPolicy(**policy))))


def _image_path(value: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": value}}


def _pixels(engine: Any, monkeypatch: Any) -> list[Any]:
    """Spy on ``engine.encode``: the list fills with each served prompt's ``pixel_values``."""
    seen: list[Any] = []
    encode = engine.encode

    def spy(request: Any, **kwargs: Any) -> Any:
        prompt = encode(request, **kwargs)
        seen.append(prompt.media["pixel_values"])
        return prompt

    monkeypatch.setattr(engine, "encode", spy)
    return seen


def _served(response: Any, seen: list[Any]) -> Any:
    """The pixels the model got for a request that must have been served."""
    assert response.status_code == 200, response.text
    return seen[-1]


def test_media_root_serves_files_under_it_and_nothing_outside(engine_for: Any, tmp_path: Any, monkeypatch) -> None:
    """``--media-root DIR``: paths and file:// URLs under DIR are read (the model gets the inline image's pixels);
    ``..``, absolute paths elsewhere, symlinks pointing out, missing files and a NUL in a path are 400s naming the
    part."""
    root, outside = tmp_path / "media", tmp_path / "secret"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    png = _png(3)
    (root / "sub" / "cat.png").write_bytes(png)
    (outside / "dog.png").write_bytes(_png(4))
    (root / "escape.png").symlink_to(outside / "dog.png")
    (root / "inner.png").symlink_to(root / "sub" / "cat.png")  # a symlink that stays inside is fine
    engine = engine_for("gemma4")
    seen = _pixels(engine, monkeypatch)
    with _client(engine) as client:
        inline = _served(_post(client, [_image_url(png)]), seen)
        assert "--media-root" in _error(_post(client, [_image_path("sub/cat.png")]))
    with _policy_client(engine, media_root=str(root)) as client:
        for ok in ("sub/cat.png", str(root / "sub" / "cat.png"), f"file://{root}/sub/cat.png", "inner.png"):
            assert torch.equal(_served(_post(client, [_image_path(ok)]), seen), inline), ok
        for bad, expected in (
            ("../secret/dog.png", "is outside this server's media root"),
            (str(outside / "dog.png"), "is outside this server's media root"),
            (f"file://{outside}/dog.png", "is outside this server's media root"),
            ("sub/../../secret/dog.png", "is outside this server's media root"),
            ("escape.png", "is outside this server's media root"),
            ("sub/missing.png", "is not a file under this server's media root"),
            ("sub", "is not a file under this server's media root"),
            ("sub/cat.png\x00.txt", "holds a NUL character"),
            ("file://sub/\x00", "holds a NUL character"),
        ):
            message = _error(_post(client, [{"type": "text", "text": "look"}, _image_path(bad)]))
            assert message.startswith("messages[0].content[1] (image_url): ") and expected in message, (bad, message)
            assert expected in _error(_post(client, [_image_path(bad)], stream=True))


def test_remote_media_is_fetched_only_when_allowed(engine_for: Any, monkeypatch: Any) -> None:
    """``--allow-remote-media``: an http URL (a real local HTTP server here) gives the model the inline image;
    without the flag it is refused naming the flag; a URL that fails is a 400, not a 500."""
    import http.server
    import threading

    png = _png(5)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != "/cat.png":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Content-Length", str(len(png)))
            self.end_headers()
            self.wfile.write(png)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    engine = engine_for("gemma4")
    seen = _pixels(engine, monkeypatch)
    try:
        with _client(engine) as client:
            inline = _served(_post(client, [_image_url(png)]), seen)
            assert "--allow-remote-media" in _error(_post(client, [_image_path(f"{url}/cat.png")]))
        with _policy_client(engine, allow_remote=True) as client:
            assert torch.equal(_served(_post(client, [_image_path(f"{url}/cat.png")]), seen), inline)
            message = _error(_post(client, [_image_path(f"{url}/nothing.png")]))
            assert "messages[0].content[0] (image_url): cannot fetch" in message and "404" in message
        with _policy_client(engine, allow_remote=True, max_item_bytes=100) as client:
            assert "--max-media-mb" in _error(_post(client, [_image_path(f"{url}/cat.png")]))
    finally:
        server.shutdown()


def test_media_over_a_server_limit_is_a_400_naming_the_limit(engine_for: Any) -> None:
    png, wav = _png(), _wav(seconds=0.5)
    engine = engine_for("gemma4")
    cases = [
        ({"max_items": 1}, [_image_url(png), _input_audio(wav)], "2 media items, over this server's limit of 1",
         "--max-media-per-request"),
        ({"max_item_bytes": 200}, [_image_url(png)], "messages[0].content[0] (image_url): about", "--max-media-mb"),
        ({"max_item_bytes": 200}, [_input_audio(wav)], "messages[0].content[0] (input_audio): about", "--max-media-mb"),
        ({"max_image_pixels": 1000}, [_image_url(png)], "32x32 pixels, over this server's limit of 1000 pixels",
         "--max-image-pixels"),
        ({"max_audio_seconds": 0.25}, [_input_audio(wav)], "0.5 s of audio, over this server's limit of 0.25 s",
         "--max-audio-seconds"),
        # A part's own controls asking for more than the server allows.
        ({"max_image_pixels": 2000}, [{**_image_url(png), "min_pixels": 4096}],
         "(image_url): min_pixels 4096, over this server's limit of 2000 pixels", "--max-image-pixels"),
        ({"max_image_pixels": 2000}, [{**_image_url(png), "max_pixels": 4096}],
         "(image_url): max_pixels 4096, over this server's limit of 2000 pixels", "--max-image-pixels"),
        ({"max_audio_seconds": 1.0}, [{**_input_audio(wav), "max_seconds": 5}],
         "(input_audio): max_seconds 5, over this server's limit of 1 s", "--max-audio-seconds"),
    ]  # fmt: skip
    for policy, parts, expected, option in cases:
        with _policy_client(engine, **policy) as client:
            for stream in (False, True):
                message = _error(_post(client, parts, stream=stream))
                assert expected in message and option in message, (policy, message)
    # At the limits, the same requests are served.
    with _policy_client(engine, max_items=2, max_image_pixels=32 * 32, max_audio_seconds=0.5) as client:
        assert _post(client, [_image_url(png), _input_audio(wav)]).status_code == 200


def test_malformed_media_controls_are_a_400_naming_the_part(engine_for: Any) -> None:
    png, wav = _png(), _wav()
    cases = [
        ({**_image_url(png), "max_pixels": -4}, "messages[0].content[0] (image_url): max_pixels must be a positive"),
        ({**_image_url(png), "max_pixels": "big"}, "max_pixels must be a positive number, got 'big'"),
        ({**_image_url(png), "max_pixels": True}, "max_pixels must be a positive number, got True"),
        ({**_image_url(png), "min_pixels": 900, "max_pixels": 400}, "min_pixels 900 is above max_pixels 400"),
        ({**_image_url(png), "max_seconds": 3}, "(image_url): max_seconds does not apply to image"),
        ({**_input_audio(wav), "max_pixels": 3}, "(input_audio): max_pixels does not apply to audio"),
    ]
    with _client(engine_for("gemma4")) as client:
        for part, expected in cases:
            message = _error(_post(client, [part]))
            assert expected in message, (part, message)
        assert _post(client, [{**_image_url(png), "min_pixels": 64 * 64}]).status_code == 200  # 32x32 upscaled


def test_media_controls_apply_to_training_rows_too(engine_for: Any, tmp_path: Any) -> None:
    """The preparer applies a row's controls: the pixels the processor gets are the image resized as documented
    (aspect ratio kept, bicubic, at most max_pixels), and a row outside no bound is left as it is."""
    from swiftcore_media import apply_controls, load_image

    image = tmp_path / "wide.png"
    Image.fromarray((np.random.RandomState(3).rand(40, 160, 3) * 255).astype(np.uint8)).save(image)
    small = apply_controls(load_image(str(image)), "image", {"max_pixels": 1600}, RATE)
    assert small.size == (80, 20) and small.size[0] * small.size[1] <= 1600
    assert apply_controls(load_image(str(image)), "image", {"max_pixels": 10**6}, RATE).size == (160, 40)
    big = apply_controls(load_image(str(image)), "image", {"min_pixels": 25600}, RATE)
    assert big.size == (320, 80)
    wave = np.zeros(RATE * 2, dtype=np.float32)
    assert len(apply_controls(wave, "audio", {"max_seconds": 0.5}, RATE)) == RATE // 2

    preparer = engine_for("qwen3_5").media_preparer()
    seen: list[Any] = []
    process = preparer.processor

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs["images"][0].size)
        return process(*args, **kwargs)

    preparer.processor = spy
    preparer.processor.image_token = process.image_token  # the preparer checks the placeholder holds it
    try:
        from swiftcore_train import encode_records

        engine = engine_for("qwen3_5")
        cfg = SimpleNamespace(loss_policy="all_assistant", max_length=4096, truncation="error", enable_thinking=None)
        record = {"messages": [{"role": "user", "content": [{"type": "image", "image": str(image), "max_pixels": 1600},
                                                             {"type": "text", "text": "What is this?"}]},
                               {"role": "assistant", "content": "a test"}]}
        [sample] = encode_records([record], engine.template, engine.tokenizer, cfg, media=preparer)
        preparer.collate([sample])
    finally:
        preparer.processor = process
    assert seen and set(seen) == {(80, 20)}, seen


def test_transcriptions_route_refuses_what_it_cannot_transcribe(engine_for: Any) -> None:
    """``/v1/audio/transcriptions`` (multipart): bad uploads, formats and models are 400s, never 500s; an
    audio model answers (the trained Qwen3-ASR's transcripts are checked in test_train_serve_roundtrip_asr)."""
    wav = _wav()

    def post(client: Any, data: bytes, **form: Any) -> Any:
        return client.post(
            "/v1/audio/transcriptions", files={"file": ("clip.wav", data, "audio/wav")}, data={"model": "m", **form}
        )

    with _client(engine_for("qwen3_asr")) as client:
        assert set(post(client, wav).json()) == {"text"}
        assert post(client, wav, response_format="text").headers["content-type"].startswith("text/plain")
        verbose = post(client, wav, response_format="verbose_json", language="en").json()
        assert verbose["duration"] == 0.5 and verbose["task"] == "transcribe" and verbose["language"] == "en"
        assert "response_format 'srt' is not supported" in _error(post(client, wav, response_format="srt"))
        # Issue 53: the error names this endpoint's field, not a chat part (messages[0].content[0]) it does not have.
        assert _error(post(client, b"not audio")).startswith("file: cannot decode the 9 given bytes as audio")
        assert "the upload is empty" in _error(post(client, b""))
        assert "temperature" in _error(post(client, wav, temperature="7"))
        assert "file" in _error(client.post("/v1/audio/transcriptions", data={"model": "m"}))
        assert post(client, wav, model="other").status_code == 404
    with _client(engine_for("qwen3_5")) as client:
        assert "model 'm' does not accept audio" in _error(post(client, wav))


def test_text_requests_are_not_held_behind_media_being_decoded(engine_for: Any, monkeypatch: Any) -> None:
    """An image request whose decoding is held back (a gate in ``load_image``) does not hold up a text request:
    media is decoded in the server's pool, not on the engine's thread; and the pool is bounded (429 when full)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import swiftcore_media
    from fastapi.testclient import TestClient
    from swiftcore_serve import ServerConfig, build_app

    engine = engine_for("qwen3_5")
    gate, decoding = threading.Event(), threading.Event()
    real_load = swiftcore_media.load_image

    def held_load(value: Any, what: str = "", **bounds: Any) -> Any:
        decoding.set()
        assert gate.wait(120), "the test never opened the gate"
        return real_load(value, what, **bounds)

    monkeypatch.setattr(swiftcore_media, "load_image", held_load)
    text = {"model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": "Hello"}]}
    image = [_image_url(_png()), {"type": "text", "text": "What is this?"}]
    with TestClient(build_app(engine, ServerConfig(model_name="m", max_queue=1, media_workers=1))) as client:
        with ThreadPoolExecutor(2) as pool:
            try:
                held = pool.submit(_post, client, image)
                assert decoding.wait(60), "the image request never started decoding"
                # The pool (one request at most: max_queue=1) is full: the next media request is refused at once.
                refused = _post(client, image)
                assert refused.status_code == 429, refused.text
                assert "decoding 1 media requests already" in refused.json()["error"]["message"]
                # On the engine's thread the image's decoding would block this one until the gate opens.
                answer = pool.submit(client.post, "/v1/chat/completions", json=text).result(timeout=60)
                assert answer.status_code == 200, answer.text
                assert not held.done()  # the image request is still being decoded
            finally:
                gate.set()
            assert held.result(timeout=120).status_code == 200


def test_media_and_text_requests_get_engine_calls_of_their_own(engine_for: Any, tmp_path: Any, monkeypatch) -> None:
    """Queued image A, text T, image B (the engine busy meanwhile): three engine calls, A, then T (text goes next
    after a call that served media), then B; never one batch of all three."""
    import asyncio
    import threading

    from swiftcore_infer import Request, SamplingParams
    from swiftcore_serve import EngineWorker

    engine = engine_for("qwen3_5")
    picture = tmp_path / "picture.png"
    picture.write_bytes(_png())
    calls: list[list[str]] = []
    stream_many = engine.stream_many

    def spy(requests: Any) -> Any:
        calls.append([r.request_id for r in requests])
        return stream_many(requests)

    monkeypatch.setattr(engine, "stream_many", spy)
    sampling = SamplingParams(max_new_tokens=2)
    image = [{"type": "image", "image": str(picture)}, {"type": "text", "text": "What is this?"}]

    def request(name: str, content: Any) -> Request:
        return Request(record={"messages": [{"role": "user", "content": content}]}, sampling=sampling, request_id=name)

    async def main() -> list[Any]:
        worker = EngineWorker(engine)
        gate = threading.Event()
        try:
            busy = asyncio.ensure_future(worker.call(lambda: gate.wait(60)))
            jobs = [asyncio.ensure_future(worker.generate(request(name, content)))
                    for name, content in (("A", image), ("T", "Hello"), ("B", image))]  # fmt: skip
            await asyncio.sleep(0.2)  # all three are queued behind the busy call
            gate.set()
            await busy
            return await asyncio.gather(*jobs)
        finally:
            worker.close()

    results = asyncio.run(main())
    assert all(r.error is None for r in results), [r.error for r in results]
    assert calls == [["A"], ["T"], ["B"]]
