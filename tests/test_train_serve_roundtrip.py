"""Train -> infer -> serve, per family: what a model learned comes back as the answer, in ``content``.

Each family's tiny checkpoint is fully fine-tuned by ``swiftcore train`` on a memorisation set: four
replies without reasoning (non-thinking form) and two with reasoning (thinking form). The checkpoint
records the majority mode (thinking off), so:

- the four questions asked plainly through ``swiftcore infer`` and through ``swiftcore deploy`` with the
  real ``openai`` client get their trained answers in ``content`` (the prompt is the one trained);
- the two asked with ``enable_thinking`` on get their answers in ``content`` and their reasoning in
  ``reasoning_content``, streamed and not streamed alike.

OLMoE's official template has no reasoning: it trains on, and is asked, the four plain questions only.

This is the test that guards the train/serve prompt rule (``swiftcore.template.base``), the response
parsing and the sample path against each later change. Qwen3-ASR's round trip (audio in, transcripts out)
is ``test_train_serve_roundtrip_asr.py``.

``swiftcore train`` and ``swiftcore infer`` run in-process (``run_cli``, click's runner on the real CLI): torch and
transformers load once for the module, not once per command. ``swiftcore deploy`` runs as a user starts it, in a
process of its own, once per family for both served tests. The tiny checkpoint is the session's
(``tiny_model_dir``: ``make-tiny``'s default seed, written once per worker and only read here).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from swiftcore_testing import deploy_process, run_cli, user_env

openai = pytest.importorskip("openai")

FAMILIES = ["qwen3_5", "gemma4", "deepseek_v4", "mimo_v2_flash", "olmoe", "glm5"]
#: Families whose official template has no reasoning: they train and are asked the plain questions only.
NO_THINKING = {"olmoe"}
PLAIN = [
    ("Which colour is the sky?", "blue"),
    ("Name a fruit.", "apple"),
    ("What do cats say?", "meow"),
    ("What is the opposite of up?", "down"),
]
THOUGHT = [
    ("How much is two plus two?", "four", "add two and two"),
    ("Which planet is largest?", "Jupiter", "recall the planets"),
]
API_KEY = "roundtrip-key"
#: Full fine-tuning steps (one batch holds the whole set). Not fewer: at 30 steps GLM-5 (tiny seed 2, train seed 2)
#: lost a word of a trained reasoning; at 40 every family answered right on 3 seeds, final loss <= 2.5e-3.
STEPS = 40


def _thought(family: str) -> list[tuple[str, str, str]]:
    return [] if family in NO_THINKING else THOUGHT


def _records(family: str) -> list[dict[str, Any]]:
    plain = [{"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]} for q, a in PLAIN]
    thought = [
        {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a, "reasoning_content": r}]}
        for q, a, r in _thought(family)
    ]
    return plain + thought


@pytest.fixture(scope="module", params=FAMILIES)
def family(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def trained(family: str, tiny_model_dir: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The family's tiny checkpoint, fully fine-tuned until it has memorised the set; its last checkpoint."""
    work = tmp_path_factory.mktemp(f"roundtrip-{family}")
    data = work / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _records(family)), encoding="utf-8")
    run_cli("train", "--model", str(tiny_model_dir(family)), "--dataset", str(data), "--tuner", "full",
            "--learning-rate", "3e-3", "--lr-scheduler", "cosine", "--batch-size", "6", "--max-steps", str(STEPS),
            "--save-steps", str(STEPS), "--logging-steps", "10", "--max-length", "128", "--no-plot",
            "--output-dir", str(work / "run"))  # fmt: skip
    losses = [
        json.loads(line)["loss"]
        for line in (work / "run" / "logs.jsonl").read_text().splitlines()
        if "loss" in json.loads(line)
    ]
    assert losses[-1] < 0.05 < losses[0], f"{family} did not memorise the set: losses {losses}"
    checkpoint = work / "run" / f"checkpoint-{STEPS}"
    args = json.loads((checkpoint / "swiftcore_args.json").read_text())
    if family not in NO_THINKING:
        assert args["generation_defaults"] == {"chat_template_kwargs": {"enable_thinking": False}}
    return checkpoint


def _question(question: str, thinking: bool | None = None) -> dict[str, Any]:
    record: dict[str, Any] = {"messages": [{"role": "user", "content": question}]}
    if thinking is not None:
        record["chat_template_kwargs"] = {"enable_thinking": thinking}
    return record


def test_infer_cli_answers_what_was_trained(family: str, trained: Path, tmp_path: Path) -> None:
    questions = [_question(q) for q, _ in PLAIN] + [_question(q, thinking=True) for q, _, _ in _thought(family)]
    source = tmp_path / "questions.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in questions), encoding="utf-8")
    run_cli(
        "infer",
        "--model",
        str(trained),
        "--input",
        str(source),
        "--output",
        str(tmp_path / "answers.jsonl"),
        "--max-new-tokens",
        "32",
    )
    rows = [json.loads(line) for line in (tmp_path / "answers.jsonl").read_text().splitlines()]
    got = [(row["response"], row.get("reasoning_content")) for row in rows]
    expected = [(a, None) for _, a in PLAIN] + [(a, r) for _, a, r in _thought(family)]
    assert got == expected


def test_the_checkpoint_is_one_plain_transformers_loads(
    family: str, trained: Path, full_checkpoint_loads_plainly: Any, tiny_model_dir: Callable[[str], Path]
) -> None:
    full_checkpoint_loads_plainly(family, trained, tiny_model_dir(family))


@pytest.fixture(scope="module")
def served(trained: Path) -> Iterator[Any]:
    """``swiftcore deploy`` of the trained checkpoint, as a user starts it; an ``openai`` client for it."""
    env = user_env(SWIFTCORE_API_KEY=API_KEY)
    with deploy_process("--model", str(trained), served_model_name="tuned", env=env) as (base, _):
        yield openai.OpenAI(base_url=f"{base}/v1", api_key=API_KEY, max_retries=0, timeout=120)


def _chat(client: Any, question: str, thinking: bool | None) -> tuple[str, str | None]:
    extra = {"chat_template_kwargs": {"enable_thinking": thinking}} if thinking is not None else None
    reply = client.chat.completions.create(
        model="tuned",
        messages=[{"role": "user", "content": question}],
        max_tokens=32,
        temperature=0,
        extra_body=extra,
    )
    message = reply.choices[0].message
    return message.content, (message.model_extra or {}).get("reasoning_content")


def _chat_streamed(client: Any, question: str, thinking: bool | None) -> tuple[str, str | None]:
    extra = {"chat_template_kwargs": {"enable_thinking": thinking}} if thinking is not None else None
    content, reasoning = "", ""
    for chunk in client.chat.completions.create(
        model="tuned",
        messages=[{"role": "user", "content": question}],
        max_tokens=32,
        temperature=0,
        extra_body=extra,
        stream=True,
    ):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        content += delta.content or ""
        reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
    return content.strip(), reasoning.strip() or None


def test_deploy_answers_what_was_trained(family: str, served: Any) -> None:
    for question, answer in PLAIN:
        assert _chat(served, question, None) == (answer, None), question
    for question, answer, reasoning in _thought(family):
        assert _chat(served, question, True) == (answer, reasoning), question


def test_deploy_streams_the_same_fields(family: str, served: Any) -> None:
    cases = [(q, None) for q, _ in PLAIN[:2]] + [(q, True) for q, _, _ in _thought(family)]
    for question, thinking in cases:
        streamed = _chat_streamed(served, question, thinking)
        content, reasoning = _chat(served, question, thinking)
        assert streamed == (content, reasoning.strip() if reasoning else None), question
