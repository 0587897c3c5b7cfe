"""The glm5 template reproduces the official Jinja byte for byte (thinking on/off, tools) and trains the right
tokens."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from swiftcore_testing import (
    build_test_tokenizer,
    check_train_serve_prefix,
    compare_fast_and_slow,
    compare_with_official,
    load_records,
    loss_runs,
)

from swiftcore.api import load_plugins
from swiftcore.api.template import (
    JinjaTemplate,
    TemplateError,
    get_template,
    official_chat_template,
    render_official,
)

DATA = Path(__file__).parent / "data"
EOS = "<|endoftext|>"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                         "required": ["city"]}}}]
TOOL_CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris and Zürich?"},
    {"role": "assistant", "content": "I will look it up.", "reasoning_content": "Two cities: two calls.",
     "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
                    {"type": "function", "function": {"name": "get_weather",
                                                      "arguments": json.dumps({"city": "Zürich", "days": 2,
                                                                               "units": ["C", "F"]})}}]},
    {"role": "tool", "content": "sunny, 20C"},
    {"role": "tool", "content": "rain, 12C"},
    {"role": "assistant", "content": "<think>\nBoth answered.\n</think>\nParis: sunny; Zürich: rain."},
]
MULTI = [{"role": "user", "content": "Is 12 even?"},
         {"role": "assistant", "content": "yes", "reasoning_content": "12 = 2*6"},
         {"role": "user", "content": "And 7?"},
         {"role": "assistant", "content": "no", "reasoning_content": "7 is odd"}]


@pytest.fixture(scope="module")
def plugins() -> Any:
    """Only this distribution's plugin (and the core's built-ins)."""
    return load_plugins(["swiftcore-template-glm"])


@pytest.fixture(scope="module")
def tpl(plugins: Any) -> Any:
    """The ``glm5`` template."""
    return get_template("glm5", plugins)


@pytest.fixture(scope="module")
def official(plugins: Any) -> str:
    """The official Jinja text."""
    return official_chat_template("glm5", plugins)


@pytest.fixture(scope="module")
def records() -> list[dict]:
    """The reference corpus (a copy of the shared reference/conversations.jsonl)."""
    return load_records(DATA / "conversations.jsonl")


def _variants(records: list[dict]) -> list[dict]:
    """Every record as given, with thinking off, with clear_thinking off, and with the tool schema."""
    out = []
    for record in records:
        for kwargs in ({}, {"enable_thinking": False}, {"enable_thinking": True}, {"clear_thinking": False}):
            merged = {**(record.get("chat_template_kwargs") or {}), **kwargs}
            out.append({**record, "chat_template_kwargs": merged, "id": f"{record['id']}{kwargs}"})
        out.append({**record, "tools": record.get("tools") or TOOLS, "id": f"{record['id']}+tools"})
    return out


@pytest.fixture(scope="module")
def tokenizer(tpl: Any, official: str, records: list[dict]) -> Any:
    """A byte-level BPE with the template's special tokens and the official chat template."""
    texts = [tpl.render(r) for r in [*records, {"messages": TOOL_CHAT, "tools": TOOLS}]]
    return build_test_tokenizer(tpl.spec.special_tokens, texts, chat_template=official, eos_token=EOS)


def test_renders_like_official(tpl: Any, official: str, records: list[dict]) -> None:
    assert official.startswith("[gMASK]<sop>")
    rendered, raised, failures = compare_with_official(tpl, official, _variants(records))
    assert not failures, "\n".join(failures[:5])
    assert rendered == 2 * 5 * len(records) and raised == 0


def test_tool_calls_and_observations(tpl: Any, official: str) -> None:
    record = {"messages": TOOL_CHAT, "tools": TOOLS}
    text = tpl.render(record)
    assert text == render_official(official, tpl.normalize(record))  # arguments given as a JSON string parsed
    assert text.startswith("[gMASK]<sop><|system|>\n# Tools\n\n") and '\n{"type": "function", ' in text
    assert ("<|system|>Be brief.<|user|>Weather in Paris and Zürich?<|assistant|><think>Two cities: two calls.</think>"
            "I will look it up."
            "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>"
            "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Zürich</arg_value><arg_key>days</arg_key>"
            '<arg_value>2</arg_value><arg_key>units</arg_key><arg_value>["C", "F"]</arg_value></tool_call>'
            "<|observation|><tool_response>sunny, 20C</tool_response><tool_response>rain, 12C</tool_response>"
            "<|assistant|><think>Both answered.</think>Paris: sunny; Zürich: rain.") in text
    # Reasoning is shown for every turn after the last user message (here both replies).
    kept = {**record, "messages": TOOL_CHAT[:3]}
    assert tpl.render(kept).endswith("<|assistant|><think>Two cities: two calls.</think>I will look it up."
                                     "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
                                     "</tool_call><tool_call>get_weather<arg_key>city</arg_key><arg_value>Zürich"
                                     "</arg_value><arg_key>days</arg_key><arg_value>2</arg_value><arg_key>units"
                                     '</arg_key><arg_value>["C", "F"]</arg_value></tool_call>')


def test_thinking_on_off_and_clear_thinking(tpl: Any, official: str) -> None:
    prompt_only = {"messages": MULTI[:3]}
    assert tpl.render(prompt_only, add_generation_prompt=True) == (
        "[gMASK]<sop><|user|>Is 12 even?<|assistant|></think>yes<|user|>And 7?<|assistant|><think>")
    off = {**prompt_only, "chat_template_kwargs": {"enable_thinking": False}}
    assert tpl.render(off, add_generation_prompt=True).endswith("<|user|>And 7?<|assistant|></think>")
    full = {"messages": MULTI}
    assert tpl.render(full).endswith("<|assistant|></think>yes<|user|>And 7?<|assistant|><think>7 is odd</think>no")
    keep = {**full, "chat_template_kwargs": {"clear_thinking": False}}
    assert tpl.render(keep) == ("[gMASK]<sop><|user|>Is 12 even?<|assistant|><think>12 = 2*6</think>yes"
                                "<|user|>And 7?<|assistant|><think>7 is odd</think>no")
    for record in (prompt_only, off, full, keep):
        for gen in (False, True):
            assert tpl.render(record, add_generation_prompt=gen) == render_official(
                official, record, add_generation_prompt=gen)


def test_bad_tool_arguments_raise(tpl: Any) -> None:
    bad = {"messages": [{"role": "user", "content": "q"},
                        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f",
                                                                                          "arguments": [1]}}]}]}
    with pytest.raises(TemplateError, match="must be a mapping"):
        tpl.render(bad)


def test_loss_is_each_reply_and_the_last_one_stops(tpl: Any, tokenizer: Any) -> None:
    """A turn ends where the next starts: history replies are trained alone, the last one with <|endoftext|>."""
    enc = tpl.encode(tokenizer, {"messages": MULTI})
    assert loss_runs(enc.input_ids, enc.labels, tokenizer) == ["</think>yes<|user|>", "7 is odd</think>no<|endoftext|>"]
    enc = tpl.encode(tokenizer, {"messages": TOOL_CHAT, "tools": TOOLS})
    runs = loss_runs(enc.input_ids, enc.labels, tokenizer)
    assert runs[0].endswith("</tool_call><|observation|>")
    assert runs[1] == "Both answered.</think>Paris: sunny; Zürich: rain.<|endoftext|>"
    plain = {"messages": [MULTI[0], {"role": "assistant", "content": "yes"}]}
    enc = tpl.encode(tokenizer, plain)  # no reasoning: trained in the non-thinking form after <|assistant|></think>
    assert enc.text.endswith("<|assistant|></think>yes<|endoftext|>")
    assert loss_runs(enc.input_ids, enc.labels, tokenizer) == ["yes<|endoftext|>"]


def test_train_serve_prefix(tpl: Any, tokenizer: Any, records: list[dict]) -> None:
    checked, failures = check_train_serve_prefix(tpl, tokenizer, [*records, {"messages": TOOL_CHAT, "tools": TOOLS}])
    assert not failures, "\n".join(failures[:5])
    assert checked >= 40


def test_jinja_fallback_trains_the_same_tokens(tpl: Any, official: str, tokenizer: Any, records: list[dict]) -> None:
    """The jinja fallback, told GLM's stop words as its end-of-turn tokens, trains what this template trains."""
    jinja = JinjaTemplate(official, end_of_turn=("<|user|>", "<|observation|>", EOS))
    compared = 0
    for record in [*records, {"messages": TOOL_CHAT, "tools": TOOLS}, {"messages": MULTI}]:
        ours = tpl.encode(tokenizer, record)
        theirs = jinja.encode(tokenizer, record)
        assert theirs.input_ids == ours.input_ids, record.get("id")
        assert theirs.labels == ours.labels, record.get("id")
        compared += 1
    assert compared >= 30


def test_fast_encode_equals_offsets_path(tpl: Any, tokenizer: Any, records: list[dict]) -> None:
    """Fast path vs the kit's offsets-only reference path (which keeps the tokenizer's EOS and added vocabulary,
    so both paths append the stop token GLM's last reply needs)."""
    compared, failures = compare_fast_and_slow(tpl, tokenizer, records)
    assert compared >= 10
    assert not failures, "\n".join(failures[:5])


def test_parse_response_reads_reasoning_and_tool_calls(tpl: Any) -> None:
    parsed = tpl.parse_response("Two calls.</think>Looking.<tool_call>get_weather<arg_key>city</arg_key>"
                                "<arg_value>Paris</arg_value><arg_key>days</arg_key><arg_value>2</arg_value>"
                                "</tool_call><|observation|>")
    assert parsed["reasoning_content"] == "Two calls." and parsed["content"] == "Looking."
    assert [json.loads(c["function"]["arguments"]) for c in parsed["tool_calls"]] == [{"city": "Paris", "days": 2}]
    assert tpl.parse_response("Paris.<|user|>")["content"] == "Paris."


def test_odd_inputs_render_like_official(tpl: Any, official: str) -> None:
    """Content None (printed ``None``, as Jinja prints it: send ``""`` with a tool-call-only reply), non-string
    argument values as JSON, a list of tool results, media parts dropped from text."""
    records = [
        {"messages": [{"role": "user", "content": "q"},
                      {"role": "assistant", "content": None, "tool_calls": [
                          {"function": {"name": "f", "arguments": {"a": True, "b": None, "c": {"x": 1}}}}]},
                      {"role": "tool", "content": [{"output": "r1"}, {"type": "text", "text": "r2"},
                                                   {"type": "image", "image": "y.png"}]},
                      {"role": "assistant", "content": "done"}]},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image", "image": "x.png"}]},
                      {"role": "assistant", "content": "b"}]},
    ]
    for record in records:
        assert tpl.render(record) == render_official(official, tpl.normalize(record))
    assert "<|assistant|></think>None<tool_call>f<arg_key>a</arg_key><arg_value>true</arg_value>" in tpl.render(
        records[0])
