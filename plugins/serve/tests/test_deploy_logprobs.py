"""``swiftcore deploy``'s log-probabilities (``/v1/completions`` ``logprobs``/``echo``, chat ``logprobs``/
``top_logprobs``), driven by the real ``openai`` client against a served tiny Qwen3 (transformers backend), each
value checked against plain transformers: ``log_softmax`` of the checkpoint's logits."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

openai = pytest.importorskip("openai")

MODEL = "tiny"
USER = [{"role": "user", "content": "Is 12 even or odd?"}]
PROMPT_IDS = [9, 40, 41, 7, 100, 55, 3, 77]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any, Any]]:
    """The server's URL, its app and the reference model (the same checkpoint in plain transformers)."""
    from swiftcore_infer import TransformersEngine
    from swiftcore_serve import ServerConfig, build_app
    from swiftcore_testing import ServerThread, make_tiny_qwen3, plugins_with_tiny_qwen3
    from transformers import AutoModelForCausalLM

    model_dir = make_tiny_qwen3(tmp_path_factory.mktemp("logprobs") / "tiny")
    app = build_app(TransformersEngine(model_dir, plugins_with_tiny_qwen3()), ServerConfig(model_name=MODEL))
    reference = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32").eval()
    with ServerThread(app) as url:
        yield url, app, reference


@pytest.fixture(scope="module")
def client(served: tuple[str, Any, Any]) -> Any:
    return openai.OpenAI(base_url=f"{served[0]}/v1", api_key="none", max_retries=0)


def _reference(model: Any, ids: list[int]) -> Any:
    """``(T - 1, vocab)``: log p(. | ids[:t]) for t = 1 .. T - 1, by plain transformers."""
    import torch

    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].float()
    return torch.log_softmax(logits, dim=-1)[:-1]


def test_echo_scores_the_prompt_ids_as_transformers_does(served: tuple[str, Any, Any], client: Any) -> None:
    _, _, reference = served
    reply = client.completions.create(model=MODEL, prompt=PROMPT_IDS, echo=True, logprobs=5, max_tokens=0)
    choice = reply.choices[0]
    logprobs = choice.logprobs
    expected = _reference(reference, PROMPT_IDS)
    assert len(logprobs.tokens) == len(PROMPT_IDS) and logprobs.token_logprobs[0] is None
    assert logprobs.top_logprobs[0] is None
    for t, (token, value) in enumerate(zip(PROMPT_IDS[1:], logprobs.token_logprobs[1:], strict=True)):
        assert value == pytest.approx(expected[t, token].item(), abs=1e-4)
        top = logprobs.top_logprobs[t + 1]
        best = expected[t].topk(5).values.tolist()
        # the 5 most likely and the prompt's own token (vLLM's shape), keyed by text (a shared text keeps the best)
        assert 1 <= len(top) <= 6 and set(top.values()) <= {*best, value} | set(top.values())
        assert max(top.values()) == pytest.approx(best[0], abs=1e-4)
    assert logprobs.text_offset[0] == 0 and logprobs.text_offset == sorted(logprobs.text_offset)
    assert reply.usage.prompt_tokens == len(PROMPT_IDS) and reply.usage.completion_tokens == 0
    assert choice.text == "".join(logprobs.tokens)


def test_a_completion_s_logprobs_are_those_of_its_tokens(served: tuple[str, Any, Any], client: Any) -> None:
    from swiftcore_infer import Request, SamplingParams

    _, app, reference = served
    reply = client.completions.create(model=MODEL, prompt=PROMPT_IDS, logprobs=2, max_tokens=4, temperature=0)
    logprobs = reply.choices[0].logprobs
    both = client.completions.create(model=MODEL, prompt=PROMPT_IDS, logprobs=0, echo=True, max_tokens=4,
                                     temperature=0)  # fmt: skip
    assert both.choices[0].logprobs.token_logprobs[len(PROMPT_IDS) :] == pytest.approx(logprobs.token_logprobs)
    assert both.choices[0].logprobs.tokens[len(PROMPT_IDS) :] == logprobs.tokens
    request = Request(prompt=PROMPT_IDS, sampling=SamplingParams(max_new_tokens=4, temperature=0))
    engine = app.state.engine
    generated = asyncio.run(app.state.worker.call(lambda: engine.generate_requests([request])[0].token_ids))
    assert len(logprobs.tokens) == len(generated) >= 1
    expected = _reference(reference, PROMPT_IDS + generated)
    for t, token in enumerate(generated):
        row = expected[len(PROMPT_IDS) - 1 + t]
        assert logprobs.token_logprobs[t] == pytest.approx(row[token].item(), abs=1e-4)
        assert logprobs.token_logprobs[t] == pytest.approx(row.max().item(), abs=1e-4)  # greedy: the likeliest
        assert 1 <= len(logprobs.top_logprobs[t]) <= 3


def test_chat_logprobs_match_transformers(served: tuple[str, Any, Any], client: Any) -> None:
    from swiftcore_infer import Request, SamplingParams

    _, app, reference = served
    reply = client.chat.completions.create(
        model=MODEL, messages=USER, logprobs=True, top_logprobs=3, max_tokens=5, temperature=0
    )
    content = reply.choices[0].logprobs.content
    worker, engine = app.state.worker, app.state.engine
    request = Request(record={"messages": USER}, sampling=SamplingParams(max_new_tokens=5, temperature=0))
    # the same greedy reply, generated again on the engine's thread: its prompt and token ids
    again = asyncio.run(worker.call(lambda: engine.generate_requests([request])[0]))
    prompt, generated = list(request.encoded), again.token_ids
    assert again.content == reply.choices[0].message.content and len(content) == len(generated)
    expected = _reference(reference, prompt + generated)
    for t, (entry, token) in enumerate(zip(content, generated, strict=True)):
        row = expected[len(prompt) - 1 + t]
        assert entry.logprob == pytest.approx(row[token].item(), abs=1e-4)
        assert [x.logprob for x in entry.top_logprobs] == pytest.approx(row.topk(3).values.tolist(), abs=1e-4)
        assert entry.bytes == list(entry.token.encode())


@pytest.mark.parametrize(
    ("path", "fields", "param"),
    [
        ("/v1/chat/completions", {"logprobs": True, "top_logprobs": 50}, "top_logprobs"),
        ("/v1/chat/completions", {"logprobs": True, "top_logprobs": -1}, "top_logprobs"),
        ("/v1/chat/completions", {"top_logprobs": 2}, "top_logprobs"),
        ("/v1/chat/completions", {"logprobs": "yes"}, "logprobs"),
        ("/v1/chat/completions", {"logprobs": True, "top_logprobs": 21, "stream": True}, "top_logprobs"),
        ("/v1/chat/completions", {"top_logprobs": 2, "stream": True}, "top_logprobs"),
        ("/v1/completions", {"logprobs": 21}, "logprobs"),
        ("/v1/completions", {"logprobs": True}, "logprobs"),
        ("/v1/completions", {"logprobs": 21, "stream": True}, "logprobs"),
        ("/v1/completions", {"logprobs": 2, "echo": True, "stream": True}, "echo"),
        ("/v1/completions", {"max_tokens": 0}, "max_tokens"),
        ("/v1/completions", {"max_tokens": -1, "echo": True}, "max_tokens"),
    ],
    ids=["top-50", "top-negative", "top-without-logprobs", "logprobs-string", "chat-stream-top-21",
         "chat-stream-top-without-logprobs", "completion-21", "completion-bool", "completion-stream-21",
         "completion-stream-echo", "max-tokens-0-without-echo", "max-tokens-negative"],
)  # fmt: skip
def test_a_bad_logprobs_value_is_a_400_naming_the_field(
    served: tuple[str, Any, Any], path: str, fields: dict[str, Any], param: str
) -> None:
    base = {"model": MODEL, **({"messages": USER} if "chat" in path else {"prompt": "Twelve is"}), "max_tokens": 2}
    reply = httpx.post(f"{served[0]}{path}", json={**base, **fields}, timeout=60)
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == param, reply.text


def test_echo_returns_the_prompt_text_first(client: Any) -> None:
    reply = client.completions.create(model=MODEL, prompt="Twelve is", echo=True, max_tokens=3, temperature=0)
    plain = client.completions.create(model=MODEL, prompt="Twelve is", max_tokens=3, temperature=0)
    assert reply.choices[0].text == "Twelve is" + plain.choices[0].text
    assert reply.choices[0].logprobs is None
