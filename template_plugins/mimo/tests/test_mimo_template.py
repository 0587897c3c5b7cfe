"""The mimo_v2 template reproduces the official Jinja byte for byte and trains the right tokens."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from swiftcore_testing import check_labels, compare_with_official, loss_runs

from swiftcore.template import JinjaTemplate, TemplateError, get_template, official_chat_template

DEFAULT = "<|im_start|>system\nYou are MiMo, an AI assistant developed by Xiaomi.<|im_end|>\n"


def _with_thinking(records: list[dict], flag: bool) -> list[dict]:
    """The records with ``enable_thinking`` set (the record's own ``chat_template_kwargs`` keep the rest)."""
    return [{**r, "chat_template_kwargs": {**r.get("chat_template_kwargs", {}), "enable_thinking": flag}}
            for r in records]


@pytest.mark.parametrize("thinking", [None, True, False], ids=["default", "thinking-on", "thinking-off"])
def test_renders_like_official(thinking: bool | None, plugins: Any, records: list[dict]) -> None:
    tpl = get_template("mimo_v2", plugins)
    official = official_chat_template("mimo_v2", plugins)
    assert official and official.startswith("{%")
    cases = records if thinking is None else _with_thinking(records, thinking)
    rendered, raised, failures = compare_with_official(tpl, official, cases)
    assert not failures, "\n".join(failures)
    assert rendered >= len(records)  # multi-turn, system, generation prompt, tools, thinking
    assert raised >= 2  # media records raise on both sides: the template is text only


def test_default_system_and_generation_prompts(plugins: Any) -> None:
    tpl = get_template("mimo_v2", plugins)
    user = {"messages": [{"role": "user", "content": "Hi"}]}
    assert tpl.render(user, add_generation_prompt=True) == (
        DEFAULT + "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")
    on = {**user, "chat_template_kwargs": {"enable_thinking": True}}
    assert tpl.render(on, add_generation_prompt=True).endswith("<|im_start|>assistant\n<think>\n")


def test_tools_follow_the_system_text(plugins: Any, records: list[dict]) -> None:
    tpl = get_template("mimo_v2", plugins)
    record = next(r for r in records if r["id"] == "m-003")
    text = tpl.render(record)
    assert text.startswith("<|im_start|>system\nYou are a weather bot.\n\n# Tools\n\n")
    assert "<tool_call>\n<function=get_weather>\n<parameter=city>\nBeijing\n</parameter>\n" in text
    assert "<|im_start|>user\n<tool_response>\n{\"temp\": 3}\n</tool_response><|im_end|>\n" in text


def test_labels_cover_assistant_turns(plugins: Any, records: list[dict], tokenizer: Any) -> None:
    tpl = get_template("mimo_v2", plugins)
    # check_labels compares loss runs with the raw content: leave out replies that inline their reasoning
    # markup (the template moves it into the thinking block, as the official one does).
    plain = [r for r in records if not any("<think>" in str(m.get("content")) for m in r["messages"])]
    checked, failures = check_labels(tpl, tokenizer, plain, "<|im_end|>", forbidden=("<|im_start|>",))
    assert not failures, "\n".join(failures)
    assert checked >= 20


def test_jinja_fallback_trains_the_same_tokens(plugins: Any, records: list[dict], tokenizer: Any) -> None:
    tpl = get_template("mimo_v2", plugins)
    jinja = JinjaTemplate.from_tokenizer(tokenizer)
    compared = 0
    for record in records:
        try:
            ours = tpl.encode(tokenizer, record)
        except TemplateError:
            with pytest.raises(TemplateError):
                jinja.encode(tokenizer, record)
            continue
        theirs = jinja.encode(tokenizer, record)
        assert theirs.input_ids == ours.input_ids, record["id"]
        assert theirs.labels == ours.labels, record["id"]
        compared += 1
    assert compared >= 25


def test_thinking_off_trains_only_the_answer(plugins: Any, tokenizer: Any) -> None:
    tpl = get_template("mimo_v2", plugins)
    record = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}
    off = tpl.encode(tokenizer, record)  # a reply without reasoning is the non-thinking form
    assert loss_runs(off.input_ids, off.labels, tokenizer) == ["Hello<|im_end|>"]
    thought = {"messages": [record["messages"][0], {**record["messages"][1], "reasoning_content": "greet"}]}
    on = tpl.encode(tokenizer, thought)
    assert loss_runs(on.input_ids, on.labels, tokenizer) == ["greet\n</think>\n\nHello<|im_end|>"]


def test_parse_response_round_trips_tool_calls(plugins: Any, records: list[dict]) -> None:
    tpl = get_template("mimo_v2", plugins)
    record = next(r for r in records if r["id"] == "m-003")
    answer = record["messages"][2]
    text = tpl.render({"tools": record["tools"], "messages": [*record["messages"][:2], answer]})
    parsed = tpl.parse_response(text.split("<|im_start|>assistant\n", 1)[1])
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed["tool_calls"]] == [
        ("get_weather", {"city": "Beijing", "days": 2})]
    assert parsed["content"] == ""


def test_plugin_import_does_not_import_torch() -> None:
    code = (
        "import sys, swiftcore_template_mimo.plugin as p; p.swiftcore_register_templates(); "
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
