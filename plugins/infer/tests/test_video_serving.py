"""Video through ``swiftcore deploy``: served answers are the offline path's, and a bad video is a 400 naming its part.

One real ``swiftcore deploy`` of the tiny Qwen3.5 (fp32, transformers backend, started once for the module, with
server-side video limits of 3 s and 48x48 pixels per frame) is asked through the real ``openai`` client with
``video_url`` parts (``data:video/mp4;base64,...``):

- each of two videos gets the answer (the tokens, prompt and completion token counts) the engine gives offline for
  the same record with the video's file path (greedy), and the two videos are two prompts (the same number of video
  tokens, other pixels, another first-token logprob, another answer);
- junk bytes, a truncated file, bad base64, a video over either limit, a remote URL and a local path are each a 400
  whose message names ``messages[0].content[1] (video_url)``; and the server answers videos after that;
- a text-only model, and a backend that feeds no video, answer a video with a 400 naming the part.

The videos are written here with PyAV: 32x32 frames, one grey level each, at 4 fps.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from swiftcore_testing import deploy_process, grey_video, user_env

av = pytest.importorskip("av")
np = pytest.importorskip("numpy")
openai = pytest.importorskip("openai")
pytest.importorskip("fastapi")

FPS = 4
QUESTION = "What happens in this video?"
API_KEY = "video-key"
SERVED = "clips"
MAX_SECONDS = 3
MAX_FRAME_PIXELS = 48 * 48
#: Greedy, a few tokens: enough to tell two answers apart, cheap on CPU.
MAX_TOKENS = 6


@pytest.fixture(scope="module")
def videos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two 2 s videos (fading up, fading down), one 5 s (over the server's 3 s), one of 64x64 frames (over 48x48)."""
    folder = tmp_path_factory.mktemp("videos")
    up = [30 * i for i in range(8)]
    return {
        "up": grey_video(folder / "up.mp4", up),
        "down": grey_video(folder / "down.mp4", up[::-1]),
        "long": grey_video(folder / "long.mp4", [10 * i for i in range(5 * FPS)]),
        "big": grey_video(folder / "big.mp4", up, size=64),
    }


@pytest.fixture(scope="module")
def qwen(tiny_model_dir: Any) -> Path:
    """The tiny Qwen3.5 checkpoint (its spec takes text, images and video)."""
    return tiny_model_dir("qwen3_5")


@pytest.fixture(scope="module")
def offline_engine(qwen: Path) -> Any:
    """The offline path: a transformers engine on the same checkpoint and dtype as the server."""
    from swiftcore_infer import TransformersEngine

    from swiftcore._plugins import load_plugins

    return TransformersEngine(qwen, load_plugins(env={}), dtype="float32", device="cpu")


@pytest.fixture(scope="module")
def client(qwen: Path) -> Iterator[Any]:
    """``swiftcore deploy`` of the tiny Qwen3.5 with small video limits, and an ``openai`` client for it."""
    args = ("--model", str(qwen), "--dtype", "float32", "--max-video-seconds", str(MAX_SECONDS),
            "--max-video-frame-pixels", str(MAX_FRAME_PIXELS))  # fmt: skip
    with deploy_process(*args, served_model_name=SERVED, env=user_env(SWIFTCORE_API_KEY=API_KEY)) as (url, _):
        yield openai.OpenAI(base_url=f"{url}/v1", api_key=API_KEY, max_retries=0, timeout=300)


def _video_url(data: bytes) -> dict[str, Any]:
    return {"type": "video_url", "video_url": {"url": "data:video/mp4;base64," + base64.b64encode(data).decode()}}


def _ask(client: Any, video_part: dict[str, Any], **extra: Any) -> Any:
    content = [{"type": "text", "text": QUESTION}, video_part]
    return client.chat.completions.create(
        model=SERVED, messages=[{"role": "user", "content": content}], max_tokens=MAX_TOKENS, temperature=0, **extra
    )


def _offline(engine: Any, path: Path, **controls: Any) -> Any:
    """The engine's greedy answer to the same question with the video's file path (as ``swiftcore infer`` reads it)
    and the part's ``controls``."""
    from swiftcore_infer import Request, SamplingParams

    content = [{"type": "text", "text": QUESTION}, {"type": "video", "video": str(path), **controls}]
    request = Request(record={"messages": [{"role": "user", "content": content}]},
                      sampling=SamplingParams(max_new_tokens=MAX_TOKENS, temperature=0.0))  # fmt: skip
    [answer] = engine.generate_requests([request])
    assert answer.error is None, answer.error
    return answer, request.encoded


def test_a_served_video_gets_the_offline_answer_and_two_videos_are_two_prompts(
    client: Any, offline_engine: Any, videos: dict[str, Path]
) -> None:
    import torch

    served, offline, prompts, firsts = {}, {}, {}, {}
    for name in ("up", "down"):
        response = _ask(client, _video_url(videos[name].read_bytes()), logprobs=True)
        served[name] = response
        offline[name], prompts[name] = _offline(offline_engine, videos[name])
        choice = response.choices[0]
        # The untrained model's reply lands in the thinking block (the template opens one): compare both parts.
        reasoning = (choice.message.model_extra or {}).get("reasoning_content")
        print(f"{name}: served {reasoning!r} + {choice.message.content!r}, offline {offline[name].text!r}, "
              f"{response.usage.prompt_tokens} prompt tokens")  # fmt: skip
        assert (reasoning, choice.message.content) == (offline[name].reasoning_content, offline[name].content)
        # Token by token: the served tokens are the offline engine's greedy ids.
        pieces = [offline_engine.tokenizer.decode([t]) for t in offline[name].token_ids]
        assert [entry.token for entry in choice.logprobs.content] == pieces and len(pieces) == MAX_TOKENS
        assert response.usage.prompt_tokens == offline[name].prompt_tokens == len(prompts[name])
        assert response.usage.completion_tokens == offline[name].completion_tokens
        assert choice.finish_reason == offline[name].finish_reason
        firsts[name] = choice.logprobs.content[0]
        # The video's tokens are in the prompt: far more than the question's own.
        assert len(prompts[name]) > 40
    # Same question, other video: the same number of video tokens, other pixels, other next-token distribution.
    up, down = prompts["up"].media["pixel_values_videos"], prompts["down"].media["pixel_values_videos"]
    assert up.shape == down.shape and not torch.equal(up, down)
    assert torch.equal(prompts["up"].media["video_grid_thw"], prompts["down"].media["video_grid_thw"])
    assert (firsts["up"].token, firsts["up"].logprob) != (firsts["down"].token, firsts["down"].logprob)
    assert offline["up"].token_ids != offline["down"].token_ids  # and, here, other answers


def test_a_parts_frame_controls_are_served_as_offline(
    client: Any, offline_engine: Any, videos: dict[str, Path]
) -> None:
    """``fps`` / ``max_frames`` next to a ``video_url`` sample the frames the server decodes, as offline."""
    import torch

    default = _ask(client, _video_url(videos["up"].read_bytes()), logprobs=True)
    for controls, groups in (({"max_frames": 2}, 1), ({"fps": 4}, 4)):
        response = _ask(client, {**_video_url(videos["up"].read_bytes()), **controls}, logprobs=True)
        answer, prompt = _offline(offline_engine, videos["up"], **controls)
        assert [entry.token for entry in response.choices[0].logprobs.content] == [
            offline_engine.tokenizer.decode([t]) for t in answer.token_ids
        ]
        assert response.usage.prompt_tokens == answer.prompt_tokens == len(prompt)
        assert int(prompt.media["video_grid_thw"][0, 0]) == groups, controls  # 2 frames a temporal patch
        assert response.usage.prompt_tokens != default.usage.prompt_tokens  # the default samples 4 frames: 2 groups
    assert torch.equal(_offline(offline_engine, videos["up"])[1].media["video_grid_thw"][0, :1], torch.tensor([2]))
    too_many = _refusal(client, {**_video_url(videos["up"].read_bytes()), "max_frames": 1000})
    assert "messages[0].content[1] (video_url): max_frames 1000 is above the 64 frames" in too_many, too_many
    assert "fps must be a positive number" in _refusal(client, {**_video_url(videos["up"].read_bytes()), "fps": -1})


def _refusal(client: Any, part: dict[str, Any], **extra: Any) -> str:
    with pytest.raises(openai.BadRequestError) as caught:
        _ask(client, part, **extra)
    assert caught.value.status_code == 400
    return str(caught.value)


def test_a_bad_video_is_a_400_naming_the_part(client: Any, videos: dict[str, Path]) -> None:
    part = "messages[0].content[1] (video_url): "
    good = videos["up"].read_bytes()
    cases = [
        (_video_url(b"not a video, just bytes"), part + "cannot read the 23 given bytes as a video"),
        (_video_url(good[: len(good) // 3]), part),
        (
            {"type": "video_url", "video_url": {"url": "data:video/mp4;base64,***"}},
            part + "the media data is not valid base64",
        ),
        (
            _video_url(videos["long"].read_bytes()),
            part + "5.0 s of video, over this server's limit of 3 s (video seconds; the server sets it with "
            "--max-video-seconds)",
        ),
        (
            _video_url(videos["big"].read_bytes()),
            part + "64x64 pixels per frame, over this server's limit of 2304 pixels (pixels per video frame; the "
            "server sets it with --max-video-frame-pixels)",
        ),
        ({"type": "video_url", "video_url": {"url": "https://example.com/clip.mp4"}}, part + "remote media is off"),
        ({"type": "video_url", "video_url": {"url": "/etc/passwd"}}, part + "got a local file path"),
    ]
    for video, expected in cases:
        message = _refusal(client, video)
        print(message)
        assert expected in message, (expected, message)
    # Streamed requests are refused the same way, before a stream starts.
    assert "5.0 s of video" in _refusal(client, _video_url(videos["long"].read_bytes()), stream=True)
    # The server still answers a good video after all that.
    assert _ask(client, _video_url(good)).choices[0].finish_reason in ("stop", "length")


def _app_client(engine: Any) -> Any:
    from fastapi.testclient import TestClient
    from swiftcore_serve import ServerConfig, build_app

    return TestClient(build_app(engine, ServerConfig(model_name="m")))


def _post_video(client: Any, data: bytes) -> str:
    body = {"model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": [
        {"type": "text", "text": QUESTION}, _video_url(data)]}]}  # fmt: skip
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 400, (response.status_code, response.text)
    return response.json()["error"]["message"]


def test_a_model_or_backend_without_video_refuses_it_naming_the_part(
    engine: Any, offline_engine: Any, videos: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = videos["up"].read_bytes()
    with _app_client(engine) as app:  # the tiny Qwen3: text only
        message = _post_video(app, data)
    assert "messages[0].content[1] (video_url): model 'm' does not accept videos (it is a text-only model)" in message
    # A backend that feeds no video (vLLM and SGLang: takes_video is off) refuses it before decoding anything.
    monkeypatch.setattr(offline_engine, "takes_video", False)
    with _app_client(offline_engine) as app:
        message = _post_video(app, data)
    assert (
        "messages[0].content[1] (video_url): the transformers backend does not take videos yet; serve this model with "
        "--backend transformers" in message
    ), message
