"""End to end: tiny OLMoE trained with ``--agent-template hermes`` on the add(a, b) tool task, served by
``swiftcore deploy`` and driven through the real ``openai`` client.

OLMoE's official template has no tool format; with the Hermes agent template the schemas, the call and the result
render inside OLMoE's own turns, so the tiny model learns the call. The rows are tests/test_agents_e2e.py's tool task
(``swiftcore_testing.tool_rows``: four pairs, one full tool loop each). The untrained model calls nothing, so a
pass is the learning signal.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from swiftcore_testing import ADD_TOOL, TOOL_PAIRS, deploy_process, run_cli, tool_rows, user_env

openai = pytest.importorskip("openai")

API_KEY = "agent-templates-e2e-key"
SERVED = "agent"
PAIRS = TOOL_PAIRS
TOOLS = [ADD_TOOL]
#: Full fine-tuning steps (batch = the four rows) and learning rate; measured on the 2-core CPU machine (see
#: docs/agents.md, "Agent templates").
STEPS, LEARNING_RATE = 60, 3e-3


@pytest.fixture(scope="module")
def trained(tiny_model_dir: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[float]]:
    """``(checkpoint, losses)``: tiny OLMoE fully fine-tuned on the tool rows with ``--agent-template hermes``."""
    import torch

    work = tmp_path_factory.mktemp("agent-olmoe")
    data = work / "tools.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in tool_rows()), encoding="utf-8")
    run = work / "run"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models gain nothing from two threads on a busy machine
    try:
        run_cli(
            "train", "--model", str(tiny_model_dir("olmoe")), "--dataset", str(data), "--agent-template", "hermes",
            "--tuner", "full", "--learning-rate", str(LEARNING_RATE), "--batch-size", str(len(PAIRS)),
            "--max-steps", str(STEPS), "--save-steps", str(STEPS), "--logging-steps", "5", "--max-length", "1024",
            "--seed", "0", "--no-plot", "--output-dir", str(run),
        )  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    logs = [json.loads(line) for line in (run / "logs.jsonl").read_text().splitlines() if line.strip()]
    return run / f"checkpoint-{STEPS}", [r["loss"] for r in logs if "loss" in r]


@pytest.fixture(scope="module")
def client(trained: tuple[Path, list[float]]) -> Iterator[Any]:
    """An ``openai`` client of ``swiftcore deploy`` serving the trained checkpoint (no --template: its manifest's)."""
    checkpoint, _ = trained
    env = user_env(SWIFTCORE_API_KEY=API_KEY)
    with deploy_process("--model", str(checkpoint), served_model_name=SERVED, env=env) as (base, _):
        yield openai.OpenAI(base_url=f"{base}/v1", api_key=API_KEY, max_retries=0, timeout=180)


def _ask(client: Any, messages: list[dict[str, Any]], **extra: Any) -> Any:
    return client.chat.completions.create(
        model=SERVED, messages=messages, tools=TOOLS, temperature=0, max_tokens=96, **extra
    )


@pytest.mark.slow
def test_checkpoint_records_the_agent_template(trained: tuple[Path, list[float]]) -> None:
    """The run trained with ``olmoe_hermes`` (recorded for deploy) and memorised the rows."""
    checkpoint, losses = trained
    args = json.loads((checkpoint / "swiftcore_args.json").read_text())
    assert "olmoe_hermes" in json.dumps(args), args
    assert losses[-1] < losses[0] / 20, losses


@pytest.mark.slow
def test_served_olmoe_calls_and_answers(client: Any) -> None:
    """Every training prompt: the first reply is a call to ``add`` with its numbers (finish_reason tool_calls); the
    test runs the tool and sends the result back; the second reply is the sum."""
    got = []
    for a, b in PAIRS:
        messages: list[dict[str, Any]] = [{"role": "user", "content": f"What is {a} plus {b}?"}]
        first = _ask(client, messages).choices[0]
        calls = [(c.function.name, json.loads(c.function.arguments)) for c in first.message.tool_calls or []]
        assert first.finish_reason == "tool_calls" and calls == [("add", {"a": a, "b": b})], first
        call = first.message.tool_calls[0]
        messages.append(first.message.model_dump(exclude_none=True))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": str(a + b)})
        second = _ask(client, messages).choices[0]
        got.append((second.finish_reason, (second.message.content or "").strip(), second.message.tool_calls))
    assert got == [("stop", str(a + b), None) for a, b in PAIRS], got


@pytest.mark.slow
def test_served_olmoe_streams_the_call(client: Any) -> None:
    """Streamed: the ``tool_calls`` deltas assemble into the call, and no ``<tool_call>`` markup leaks as content."""
    a, b = PAIRS[1]
    chunks = [
        c for c in _ask(client, [{"role": "user", "content": f"What is {a} plus {b}?"}], stream=True) if c.choices
    ]
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assembled: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for delta in chunk.choices[0].delta.tool_calls or []:
            call = assembled.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
            call["id"] += delta.id or ""
            call["name"] += (delta.function.name or "") if delta.function else ""
            call["arguments"] += (delta.function.arguments or "") if delta.function else ""
    assert [(c["name"], json.loads(c["arguments"])) for c in assembled.values()] == [("add", {"a": a, "b": b})]
    assert text.strip() == "", text
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
