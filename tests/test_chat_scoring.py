"""``swiftcore deploy``'s scoring extension of ``POST /v1/chat/completions``: ``completion_token_ids`` with
``max_tokens: 0`` and ``logprobs: true`` scores the given ids as the assistant's reply to the conversation (what a
distillation trainer's ``--teacher-server`` asks). On a served tiny Qwen3 (the real app, transformers backend) the
scored log-probs equal ``/v1/completions``' echo log-probs of the same prompt ids followed by the same ids; each
malformed request is a 400 naming its field."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

MODEL = "tiny"
MESSAGES = [{"role": "user", "content": "Is 12 even or odd?"}]
REPLY_IDS = [9, 40, 41, 7, 100, 55]
SCORE = {"completion_token_ids": REPLY_IDS, "max_tokens": 0, "logprobs": True}


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The served tiny Qwen3."""
    from swiftcore_infer import TransformersEngine
    from swiftcore_serve import ServerConfig, build_app
    from swiftcore_testing import ServerThread, make_tiny_qwen3, plugins_with_tiny_qwen3

    model_dir = make_tiny_qwen3(tmp_path_factory.mktemp("scoring") / "tiny")
    app = build_app(TransformersEngine(model_dir, plugins_with_tiny_qwen3()), ServerConfig(model_name=MODEL))
    with ServerThread(app) as served:
        yield served


def _chat(url: str, **fields: Any) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", json={"model": MODEL, "messages": MESSAGES, **fields}, timeout=60)


def test_scored_reply_equals_the_echo_logprobs_of_prompt_and_reply(url: str) -> None:
    reply = _chat(url, **SCORE, return_token_ids=True)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    prompt = body["prompt_token_ids"]
    choice = body["choices"][0]
    assert choice["token_ids"] == REPLY_IDS
    got = [entry["logprob"] for entry in choice["logprobs"]["content"]]
    # the prompt the server encoded is the one a generating request is encoded into
    generated = _chat(url, max_tokens=2, temperature=0, return_token_ids=True).json()
    assert generated["prompt_token_ids"] == prompt and len(generated["choices"][0]["token_ids"]) <= 2
    echo = httpx.post(
        f"{url}/v1/completions",
        json={"model": MODEL, "prompt": prompt + REPLY_IDS, "echo": True, "max_tokens": 0, "logprobs": 0},
        timeout=60,
    ).json()
    want = echo["choices"][0]["logprobs"]["token_logprobs"][len(prompt) :]
    assert len(got) == len(REPLY_IDS)
    assert got == pytest.approx(want, abs=1e-5)
    assert max(got) - min(got) > 0.1  # real, varied log-probs (not one constant)
    assert body["usage"] == {
        "prompt_tokens": len(prompt),
        "completion_tokens": len(REPLY_IDS),
        "total_tokens": len(prompt) + len(REPLY_IDS),
    }
    # another conversation scores the same ids otherwise: the prompt is the context
    other = _chat(url, **SCORE, messages=[{"role": "user", "content": "Name a colour."}]).json()
    assert (
        max(abs(a["logprob"] - b) for a, b in zip(other["choices"][0]["logprobs"]["content"], got, strict=True)) > 1e-3
    )


@pytest.mark.parametrize(
    ("fields", "param", "says"),
    [
        ({"max_tokens": 0, "logprobs": True}, "max_tokens", "send completion_token_ids"),  # nothing to do
        ({**SCORE, "max_tokens": 3}, "max_tokens", "send max_tokens: 0"),  # ids and a generation
        ({**SCORE, "max_tokens": None}, "max_tokens", "send max_tokens: 0"),
        ({**SCORE, "max_completion_tokens": 3}, "max_completion_tokens", "leave max_completion_tokens out"),
        ({**SCORE, "logprobs": False}, "logprobs", "needs logprobs: true"),
        ({**SCORE, "logprobs": None}, "logprobs", "needs logprobs: true"),
        ({**SCORE, "stream": True}, "stream", "completion_token_ids is not streamed"),
        ({**SCORE, "completion_token_ids": [5, 10**9]}, "completion_token_ids", "must be integers in [0, "),
        (
            {**SCORE, "modalities": ["text", "audio"], "audio": {"voice": "a", "format": "wav"}},
            "modalities",
            "completion_token_ids scores a given reply and speaks nothing",
        ),
    ],
)
def test_malformed_scoring_requests_are_400_naming_the_field(
    url: str, fields: dict[str, Any], param: str, says: str
) -> None:
    reply = _chat(url, **{k: v for k, v in fields.items() if v is not None})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == param and says in error["message"], error


@pytest.mark.parametrize("ids", [[], [-1], [1.5], "5"])
def test_ids_of_the_wrong_shape_are_refused_naming_the_field(url: str, ids: Any) -> None:
    reply = _chat(url, **{**SCORE, "completion_token_ids": ids})
    assert reply.status_code == 400, reply.text
    assert "completion_token_ids" in reply.text
