"""Agents end to end: a tiny model trained on OpenAI-format tool data calls the tool when served.

For each family whose official chat template has a tool format (Qwen3.5, Gemma 4, DeepSeek-V4, GLM-5,
MiMo-V2-Flash), a tiny random model is fully fine-tuned by
``swiftcore train`` on four rows of a tool task (``user: What is 3 plus 4?`` -> ``assistant: add(a=3, b=4)``
-> ``tool: 7`` -> ``assistant: 7``, ``tools=[add]`` on every row) until it has memorised them; then
``swiftcore deploy`` (transformers backend) serves it and the real ``openai`` client drives the tool loop for
every training prompt: the first reply stops with ``finish_reason == "tool_calls"`` and the call's name and JSON
arguments; the test runs the tool, sends its result back as a ``tool`` message, and the second reply's content is
the result. One streamed request checks that the ``tool_calls`` deltas assemble into the same call. The
untrained model calls nothing, so a pass is the learning signal (the model answers its training targets).

OLMoE's and Qwen3-ASR's official templates have no tool format: the tool schemas, calls and results render as
nothing, as in their official Jinja (``test_family_without_tool_format_renders_no_tools``), so they have no
end-to-end case; see docs/agents.md.

A cheaper check runs without training: the training encoding of a tool row puts the call tokens in the loss and
the tool's result outside it (``test_tool_call_trained_tool_result_not``).

Each family's model is trained, and its server started, once per module; the first (greedy) reply to each training
prompt is asked once and checked by both the calls test and the loop test.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from swiftcore_testing import (
    ADD_TOOL,
    TOOL_PAIRS,
    deploy_process,
    loss_runs,
    run_cli,
    tool_question,
    tool_rows,
    user_env,
)

openai = pytest.importorskip("openai")

API_KEY = "agents-e2e-key"
SERVED = "agent"
PAIRS = TOOL_PAIRS  # the tool task: swiftcore_testing.tool_tasks (shared with the agent templates' test)
TOOLS = [ADD_TOOL]


@dataclass(frozen=True)
class Family:
    """How one family is trained and asked.

    Attributes:
        steps: full fine-tuning steps (batch = all four rows) after which greedy decoding gives every target.
        learning_rate: the learning rate of those steps.
        tool_result: how the family's template renders the tool message ``7`` (must stay out of the loss).
        chat_kwargs: ``chat_template_kwargs`` sent with each request: the rows carry no reasoning, so they train
            the non-thinking prompt, and a family whose serving default is thinking is asked without it.
        config: ``config.json`` entries that replace the tiny checkpoint's before training (see ``FAMILIES``).
    """

    steps: int
    learning_rate: float
    tool_result: str
    chat_kwargs: dict[str, Any] | None = None
    config: dict[str, Any] | None = None


NO_THINKING = {"enable_thinking": False}
# Every family whose official template has a tool format. Steps measured on the 2-core CPU machine (one torch
# thread): Qwen3.5 at 40 steps still called add(3, 4) for 5 + 8; 60 gave every call and answer. Gemma 4 gave every
# call at 40 with the plain loss, but with the chunked loss (the default; step-1 loss and grad norm equal to 1e-7, then
# Adam's trajectory drifts apart) it called add(5, 4) for 3 + 4; 60 steps of 1e-3 gave every call on an AVX-512 CPU
# but not on an AVX2-only one (final loss 0.033: add(5, 4) for 5 + 8, add(212, 9) for 21 + 9). On the AVX2 CPU,
# training seeds 0/1/2: 60 steps of 2e-3 or 3e-3 and 80 of 1e-3 or 2e-3 each failed a seed (loss stuck at 0.02-0.04, a
# number swapped between prompts); 100 of 1e-3 gave every call and answer for seeds 0-6 (final loss 0.001-0.014;
# 0.0087 for seed 0) and for two seeds of another tiny init. MiMo-V2-Flash at 60 (loss 0.018) still called
# add(3, 4) for 5 + 8, and 70 of 4e-3 (loss 0.0084, training seeds 0/1/2 alike) called add(5, 8) for 3 + 4.
# Those steps were measured with the session's 512-piece tiny tokenizers, on which the rows took 200-880 tokens and
# one step of the four rows 7.1 s for DeepSeek-V4 (~880 tokens, eager attention with sinks), 4.5 s for MiMo-V2-Flash
# (~770), 2.9 s for Qwen3.5 (~790): the module took 984 s of a CI worker. The tokenizers here also learnt the rendered
# rows (_tiny_with_tool_tokenizer), as a real tokenizer knows ordinary text: the rows take 310-370 tokens, and the same
# steps and learning rates gave every call and answer for the tiny inits of seeds 0 and 1 (2026-12-06, AVX2 machine);
# each family's training, deploy and replies took 23-124 s of a loaded machine (DeepSeek-V4 the most).
FAMILIES: dict[str, Family] = {
    "qwen3_5": Family(60, 3e-3, "<tool_response>\n7\n</tool_response>", NO_THINKING),
    "gemma4": Family(100, 1e-3, 'response:add{value:<|"|>7<|"|>}'),
    # DeepSeek-V4: the tiny config's 8-token sliding window cannot copy the question's numbers into a call written
    # ~100 tokens of tool markup later (the loss stalled at 0.0055 and it called add(12, 30) for 5 + 8); with the
    # release's window (128) 100 steps reach loss 0.0005 and every call carries its prompt's numbers.
    "deepseek_v4": Family(100, 3e-3, "<tool_result>7</tool_result>", config={"sliding_window": 128}),
    # GLM-5's lightning indexer picks the keys each query attends to and gets no gradient from the LM loss
    # (transformers runs it under no_grad; GLM-5 trains it apart). The tiny checkpoint keeps 16 keys, so a random
    # indexer hides the question's numbers from the ~800-token tool prompt and the loss plateaus near 0.5 (measured:
    # 0.48 at step 30 of 3e-3); the release's index_topk (2048, transformers' default) attends to every key of a
    # sequence this short, as GLM-5 itself does.
    "glm5": Family(100, 3e-3, "<tool_response>7</tool_response>", NO_THINKING, {"index_topk": 2048}),
    "mimo_v2_flash": Family(100, 3e-3, "<tool_response>\n7\n</tool_response>", NO_THINKING),
}
# Families whose tiny model does not call add with every prompt's own numbers (so the loop's final answer, the result
# of that call, is not a + b either); the reason is the tiny model, not the template or the parser (strict xfail).
CALL_XFAIL: dict[str, str] = {}
# Families whose final answer (after the tool result) does not come back; the reason is a train/serve mismatch,
# not the test (each is marked xfail, strict).
ANSWER_XFAIL: dict[str, str] = {}
# (Gemma 4's answer after the tool result used to be one: serving renders the call's turn without the empty thought
# channel the call was trained after. Its template now trains each round after the prompt serving renders for it:
# Gemma4Template.training_rounds.)


_rows = tool_rows


def _losses(log_file: Path) -> list[float]:
    rows = [json.loads(line) for line in log_file.read_text().splitlines() if line.strip()]
    return [r["loss"] for r in rows if "loss" in r]


# ---------------------------------------------------------------------------------- training data


@pytest.mark.parametrize("name", list(FAMILIES))
def test_tool_call_trained_tool_result_not(name: str, tiny_model_dir: Any) -> None:
    """The encoding ``swiftcore train`` uses: the call is trained (and parses back into the same OpenAI call),
    the final answer is trained, the tool's result is not."""
    from transformers import AutoTokenizer

    import swiftcore
    from swiftcore.models import resolve_model_spec
    from swiftcore.template import get_template

    plugins = swiftcore.load_plugins(env={})
    model_dir = tiny_model_dir(name)
    tpl = get_template(resolve_model_spec(str(model_dir), plugins).default_template, plugins)
    tok = AutoTokenizer.from_pretrained(model_dir)
    enc = tpl.encode(tok, _rows()[0])
    assert FAMILIES[name].tool_result in enc.text  # the result is in the sequence ...
    runs = loss_runs(enc.input_ids, enc.labels, tok)
    assert all(FAMILIES[name].tool_result not in run for run in runs)  # ... but not in the loss
    assert len(runs) == 2, runs
    call = tpl.parse_response(runs[0])
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in call["tool_calls"]] == [
        ("add", {"a": 3, "b": 4})
    ]
    assert tpl.parse_response(runs[1])["content"].strip() == "7"


@pytest.mark.parametrize("name", ["olmoe", "qwen3_asr"])
def test_family_without_tool_format_renders_no_tools(name: str) -> None:
    """OLMoE's and Qwen3-ASR's official templates have no tool format: the tool schemas, the call and the tool's
    result of a tool row all render as nothing (as the official Jinja does), so these families get no end-to-end
    tool case. Fails the day either template renders tools (then it belongs in FAMILIES)."""
    import swiftcore
    from swiftcore.template import get_template

    text = get_template(name, swiftcore.load_plugins(env={})).render(_rows()[0])
    assert "add" not in text and "Add two integers" not in text, text  # no schema, no call
    assert text.count("7") == 1, text  # the final answer only: the tool's "7" is dropped


# ---------------------------------------------------------------------------------- trained and served


def _tiny_with_tool_tokenizer(name: str, out: Path) -> Path:
    """The family's tiny checkpoint (seed 0) whose tokenizer also learnt the rendered tool rows: the tool preamble
    then takes about as few tokens as a real tokenizer gives it (DeepSeek-V4's rows ~370 tokens, not ~880 with
    the 512-piece tiny tokenizer), and each training step and served reply costs several times less."""
    from swiftcore_tiny import make_tiny

    import swiftcore
    from swiftcore.template import get_template

    plugins = swiftcore.load_plugins(env={})
    spec = plugins.registry.get("model", name)
    template = get_template(spec.default_template, plugins)
    return make_tiny(spec, out, seed=0, tokenizer_texts=[template.render(row) for row in _rows()])


#: The family make test (CI) trains, serves and drives through the tool loop; the other families run in make test-all
#: (docs/testing.md, "Two tiers"): each costs a full fine-tune and a server of its own (DeepSeek-V4's ~3 minutes), and
#: their templates' tool rendering and training labels stay in make test (test_tool_call_trained_tool_result_not,
#: plugins/agent_templates/tests, the templates' official-output tests).
IN_MAKE_TEST = "qwen3_5"


@pytest.fixture(
    scope="module",
    params=[name if name == IN_MAKE_TEST else pytest.param(name, marks=pytest.mark.extended) for name in FAMILIES],
)
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    """``(family, openai client)``: the family's tiny model fully fine-tuned on the tool rows, then deployed."""
    import torch

    name: str = request.param
    family = FAMILIES[name]
    work = tmp_path_factory.mktemp(f"agents-{name}")
    data = work / "tools.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _rows()), encoding="utf-8")
    model = _tiny_with_tool_tokenizer(name, work / "base")
    if family.config:  # the tiny checkpoint's config with those entries replaced
        config = json.loads((model / "config.json").read_text())
        (model / "config.json").write_text(json.dumps({**config, **family.config}, indent=2))
    run = work / "run"
    # One torch thread: these models gain nothing from two, and the pool's waits are slow on a busy machine.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run_cli(
            "train", "--model", str(model), "--dataset", str(data), "--tuner", "full",
            "--learning-rate", str(family.learning_rate), "--batch-size", str(len(PAIRS)),
            "--max-steps", str(family.steps), "--save-steps", str(family.steps), "--logging-steps", "5",
            "--max-length", "1024", "--seed", "0", "--no-plot", "--output-dir", str(run),
        )  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    losses = _losses(run / "logs.jsonl")
    assert losses[-1] < losses[0] / 20, f"{name} did not memorise the tool rows: losses {losses}"
    env = user_env(SWIFTCORE_API_KEY=API_KEY)
    with deploy_process("--model", str(run / f"checkpoint-{family.steps}"), served_model_name=SERVED, env=env) as (
        base,
        _,
    ):
        yield name, openai.OpenAI(base_url=f"{base}/v1", api_key=API_KEY, max_retries=0, timeout=180)


def _ask(client: Any, name: str, messages: list[dict[str, Any]], **extra: Any) -> Any:
    """One greedy chat completion with the add tool offered (256 new tokens: with the 512-piece tiny tokenizers
    DeepSeek-V4's DSML call alone was ~130 tokens, and at 128 it stopped with ``length``)."""
    kwargs = FAMILIES[name].chat_kwargs
    body = {"chat_template_kwargs": kwargs} if kwargs else None
    return client.chat.completions.create(
        model=SERVED, messages=messages, tools=TOOLS, temperature=0, max_tokens=256, extra_body=body, **extra
    )


@pytest.fixture(scope="module")
def first_reply(served: tuple[str, Any]) -> Callable[[int, int], Any]:
    """``first_reply(a, b)``: the family's (greedy) first reply to ``What is A plus B?``, asked once per family (in
    the test that first needs it, so a failed request fails, or xfails, that test): the calls test and the loop test
    both check it, and each DeepSeek-V4 reply is a DSML call on a ~370-token prompt."""
    name, client = served
    asked: dict[tuple[int, int], Any] = {}

    def get(a: int, b: int) -> Any:
        if (a, b) not in asked:
            asked[(a, b)] = _ask(client, name, _question(a, b)).choices[0]
        return asked[(a, b)]

    return get


_question = tool_question


@pytest.mark.slow
def test_served_model_calls_the_tool(
    served: tuple[str, Any], first_reply: Callable[[int, int], Any], request: pytest.FixtureRequest
) -> None:
    """First reply of every training prompt: a call to ``add`` with that prompt's numbers, and nothing else."""
    name, _ = served
    if name in CALL_XFAIL:  # the family comes from a module fixture's parameter: mark the case here
        request.applymarker(pytest.mark.xfail(strict=True, reason=CALL_XFAIL[name]))
    got = []
    for a, b in PAIRS:
        choice = first_reply(a, b)
        calls = choice.message.tool_calls or []
        got.append((choice.finish_reason, [(c.function.name, json.loads(c.function.arguments)) for c in calls]))
        assert all(c.id and c.type == "function" for c in calls)
    assert got == [("tool_calls", [("add", {"a": a, "b": b})]) for a, b in PAIRS], f"{name}: {got}"


@pytest.mark.slow
def test_served_model_streams_the_tool_call(served: tuple[str, Any]) -> None:
    """Streamed: the ``tool_calls`` deltas assemble into the same call, and no raw call markup leaks as content."""
    name, client = served
    a, b = PAIRS[0]
    chunks = [c for c in _ask(client, name, _question(a, b), stream=True) if c.choices]
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assembled: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for delta in chunk.choices[0].delta.tool_calls or []:
            call = assembled.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
            call["id"] += delta.id or ""
            call["name"] += (delta.function.name or "") if delta.function else ""
            call["arguments"] += (delta.function.arguments or "") if delta.function else ""
    assert [(c["name"], json.loads(c["arguments"])) for c in assembled.values()] == [("add", {"a": a, "b": b})]
    assert all(c["id"] for c in assembled.values())
    assert text.strip() == "", f"{name}: content beside the call: {text!r}"
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


@pytest.mark.slow
def test_served_model_answers_with_the_tool_result(
    served: tuple[str, Any], first_reply: Callable[[int, int], Any], request: pytest.FixtureRequest
) -> None:
    """The full loop: the call comes back, the test runs ``add`` and returns its result as a ``tool`` message (the
    assistant message sent back as the client received it), and the second reply's content is that result."""
    name, client = served
    reason = ANSWER_XFAIL.get(name) or CALL_XFAIL.get(name)
    if reason:  # the family comes from a module fixture's parameter: mark the case here
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))
    answers = []
    for a, b in PAIRS:
        messages = _question(a, b)
        first = first_reply(a, b)
        assert first.finish_reason == "tool_calls", f"{name}: {first}"
        call = first.message.tool_calls[0]
        args = json.loads(call.function.arguments)
        result = str(args["a"] + args["b"])  # run the tool
        messages.append(first.message.model_dump(exclude_none=True))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        second = _ask(client, name, messages).choices[0]
        answers.append((second.finish_reason, (second.message.content or "").strip(), second.message.tool_calls))
    assert answers == [("stop", str(a + b), None) for a, b in PAIRS], f"{name}: {answers}"
