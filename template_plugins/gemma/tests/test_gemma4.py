"""gemma4 reproduces the official (updated) Jinja byte for byte and trains the model turns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from swiftcore_testing import build_test_tokenizer, check_labels, compare_with_official, load_records, loss_runs

import swiftcore
from swiftcore.template import JinjaTemplate, get_template, official_chat_template

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def plugins() -> Any:
    return swiftcore.load_plugins(["swiftcore-template-gemma"])


@pytest.fixture(scope="module")
def records() -> list[dict]:
    return load_records(DATA / "conversations.jsonl")


@pytest.fixture(scope="module")
def tok(plugins: Any, records: list[dict]) -> Any:
    tpl = get_template("gemma4", plugins)
    return build_test_tokenizer(tpl.spec.special_tokens, [tpl.render(r) for r in records], eos_token="<turn|>")


RICH_TOOL = {
    "type": "function",
    "function": {
        "name": "book",
        "description": "Book a trip",
        "parameters": {
            "type": "object",
            "required": ["where"],
            "properties": {
                "where": {"type": "string", "description": "City", "nullable": True},
                "Mode": {"type": "string", "enum": ["air", "rail"]},
                "when": {
                    "type": "object",
                    "description": "Dates",
                    "required": ["start"],
                    "properties": {"start": {"type": "string"}, "nights": {"type": "integer"}},
                },
                "guests": {
                    "type": "array",
                    "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}},
                },
                "tags": {"type": "array", "items": {"type": ["string", "null"]}},
            },
        },
        "response": {"type": "object", "description": "Booking"},
    },
}
RICH = {
    "id": "rich",
    "tools": [RICH_TOOL],
    "messages": [
        {"role": "system", "content": "Travel agent."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Book "},
                {"type": "image", "image": "a.png"},
                {"type": "audio", "audio": "b.wav"},
            ],
        },
        {
            "role": "assistant",
            "reasoning_content": "Need a call.",
            "tool_calls": [
                {
                    "id": "c1",
                    "function": {
                        "name": "book",
                        "arguments": {"where": "Oslo", "guests": [{"name": "Ann"}], "flex": True, "n": 2.5},
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "booked"}]},
        {"role": "assistant", "content": "<|channel>hidden<channel|>Done."},
    ],
}


@pytest.mark.parametrize("name", ["gemma4", "gemma4_launch"])
def test_renders_like_official(name: str, plugins: Any, records: list[dict]) -> None:
    tpl = get_template(name, plugins)
    official = official_chat_template(name, plugins)
    assert official is not None
    cases = [*records, RICH]
    thinking = [{**r, "chat_template_kwargs": {"enable_thinking": True}} for r in cases]
    rendered, raised, failures = compare_with_official(tpl, official, cases + thinking, extra={"bos_token": "<bos>"})
    assert not failures, "\n".join(failures)
    assert rendered == 4 * len(cases) and raised == 0


@pytest.mark.parametrize("name", ["gemma4", "gemma4_launch"])
def test_labels(name: str, plugins: Any, records: list[dict], tok: Any) -> None:
    tpl = get_template(name, plugins)
    plain = [r for r in records if "tools" not in r]  # tool turns are checked below
    checked, failures = check_labels(tpl, tok, plain, "<turn|>", forbidden=("<|turn>",))
    assert not failures, "\n".join(failures)
    assert checked == len(plain)


def test_tool_responses_inside_the_model_turn_carry_no_loss(plugins: Any, records: list[dict], tok: Any) -> None:
    tpl = get_template("gemma4", plugins)
    record = next(r for r in records if "parallel" in r["tags"])
    enc = tpl.encode(tok, record)
    runs = loss_runs(enc.input_ids, enc.labels, tok)
    # the calls and the hand-over token are trained; the tool's responses are not
    assert runs[0].startswith("<|tool_call>call:get_weather{") and runs[0].endswith("<tool_call|><|tool_response>")
    assert runs[-1] == "It is 21°C and clear.<turn|>"
    assert all("response:" not in run for run in runs)
    parsed = tpl.parse_response(runs[0])
    assert [c["function"]["name"] for c in parsed["tool_calls"]] == ["get_weather", "search"]


def test_thinking_flag_changes_system_turn_and_generation_prompt(plugins: Any) -> None:
    tpl = get_template("gemma4", plugins)
    record = {"messages": [{"role": "user", "content": "Hi"}]}
    on = tpl.render({**record, "chat_template_kwargs": {"enable_thinking": True}}, add_generation_prompt=True)
    off = tpl.render(record, add_generation_prompt=True)
    assert on == "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\n"
    assert off == "<bos><|turn>user\nHi<turn|>\n<|turn>model\n<|channel>thought\n<channel|>"


def test_launch_renders_tool_messages_as_tool_turns(plugins: Any, records: list[dict], tok: Any) -> None:
    tpl = get_template("gemma4_launch", plugins)
    record = next(r for r in records if "parallel" in r["tags"])
    enc = tpl.encode(tok, record)
    assert '<|turn>tool\n{"temp": 21, "sky": "clear"}<turn|>' in enc.text
    runs = loss_runs(enc.input_ids, enc.labels, tok)
    assert runs[0].startswith("<|tool_call>call:get_weather{") and runs[0].endswith("<tool_call|><turn|>")
    assert runs[-1] == "It is 21°C and clear.<turn|>"


@pytest.mark.parametrize("name", ["gemma4", "gemma4_launch"])
def test_jinja_fallback_trains_the_same_tokens(name: str, plugins: Any, records: list[dict], tok: Any) -> None:
    tpl = get_template(name, plugins)
    jinja = JinjaTemplate(official_chat_template(name, plugins), extra={"bos_token": "<bos>"})
    for record in records:
        conv = tpl.training_conversation(tpl.normalize(record))
        if tpl.reply_has_reasoning(conv) and not any(m.get("tool_calls") for m in conv.messages):
            # a trained reply keeps its reasoning; the official template drops it outside tool calls
            assert "<|channel>thought\n" in tpl.encode(tok, record).text
            continue
        ours, theirs = tpl.encode(tok, record), jinja.encode(tok, record)
        assert theirs.text == ours.text, record["id"]
        assert theirs.labels == ours.labels, (
            record["id"],
            loss_runs(ours.input_ids, ours.labels, tok),
            loss_runs(theirs.input_ids, theirs.labels, tok),
        )


@pytest.mark.parametrize("name", ["gemma4", "gemma4_launch"])
@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ({"role": "robot", "content": "beep"}, "message 1: role 'robot' has no Gemma 4 turn"),
        ({"role": "user", "content": 42}, "message 1: content must be a string or a list of parts, got int"),
    ],
)
def test_unknown_roles_and_non_string_content_are_refused(
    name: str, message: dict, expected: str, plugins: Any
) -> None:
    tpl = get_template(name, plugins)
    from swiftcore.template import TemplateError

    with pytest.raises(TemplateError, match=expected):
        tpl.render({"messages": [{"role": "user", "content": "hi"}, message]})


MULTI_ROUND = {
    "id": "two-calls",
    "tools": [RICH_TOOL],
    "messages": [
        {"role": "user", "content": "Book Oslo, then Rome."},
        {
            "role": "assistant",
            "tool_calls": [{"id": "c1", "function": {"name": "book", "arguments": {"where": "Oslo"}}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {
            "role": "assistant",
            "content": "Oslo done.",
            "tool_calls": [{"id": "c2", "function": {"name": "book", "arguments": {"where": "Rome"}}}],
        },
        {"role": "tool", "tool_call_id": "c2", "content": "ok"},
        {"role": "assistant", "content": "Both booked."},
    ],
}


def _trained_spans(labels: list[int]) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    for i, label in enumerate(labels):
        if label == -100:
            continue
        if spans and spans[-1][1] == i:
            spans[-1] = (spans[-1][0], i + 1)
        else:
            spans.append((i, i + 1))
    return spans


@pytest.mark.parametrize("thinking", [None, True])
def test_each_reply_round_is_trained_after_the_prompt_serving_renders(
    thinking: bool | None, plugins: Any, records: list[dict], tok: Any
) -> None:
    """Issue #50: each round of a tool reply (the call, then the answer after the tool's result) is trained on a
    prefix token-equal to the official Jinja's rendering of the history before it with add_generation_prompt=True
    (the prompt serving sends), and every round of the reply is trained exactly once."""
    tpl = get_template("gemma4", plugins)
    jinja = JinjaTemplate(official_chat_template("gemma4", plugins), extra={"bos_token": "<bos>"})
    cases = [r for r in records if "tools" in r["tags"]] + [RICH, MULTI_ROUND]
    if thinking is not None:
        cases = [{**r, "chat_template_kwargs": {"enable_thinking": thinking}} for r in cases]
    checked = 0
    for record in cases:
        rounds = tpl.training_rounds(record)
        roles = [m["role"] for m in record["messages"]]
        reply = [
            i
            for i, role in enumerate(roles)
            if role == "assistant" and i > max(j for j, r in enumerate(roles) if r == "user")
        ]
        assert len(rounds) == len(reply), record["id"]
        trained_text = []
        for k, sub in enumerate(rounds):
            enc = tpl.encode(tok, sub)
            spans = _trained_spans(enc.labels)
            assert len(spans) == 1, (record["id"], k, loss_runs(enc.input_ids, enc.labels, tok))  # only its round
            start, end = spans[0]
            last = max(i for i, m in enumerate(sub["messages"]) if m["role"] == "assistant")  # the trained round
            history = {
                **sub,
                "messages": sub["messages"][:last],
                "chat_template_kwargs": {"enable_thinking": tpl.thinking_mode(record)},
            }
            served = tok(jinja.render(history, add_generation_prompt=True), add_special_tokens=False)["input_ids"]
            assert enc.input_ids[:start] == served, (
                record["id"],
                k,
                tok.decode(enc.input_ids[:start]),
                tok.decode(served),
            )
            trained_text.append(tok.decode(enc.input_ids[start:end]))
            checked += 1
        assert "response:" not in "".join(trained_text)  # the tool's results stay out of the loss
        if roles[-1] == "assistant":  # the final answer is trained, with its stop
            assert trained_text[-1].endswith("<turn|>"), trained_text
    assert checked == 3 * 1 + 6 * 2 + 2 + 3  # 3 open calls, 6 call-then-answer records, RICH, MULTI_ROUND
