"""The olmoe template reproduces the official Jinja byte for byte and trains the right tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from swiftcore_testing import (
    build_test_tokenizer,
    check_labels,
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
#: What transformers passes the official template from OLMoE's tokenizer (BOS and EOS are one token).
TOKENS = {"bos_token": EOS, "eos_token": EOS}


@pytest.fixture(scope="module")
def plugins() -> Any:
    """Only this distribution's plugin (and the core's built-ins)."""
    return load_plugins(["swiftcore-template-olmo"])


@pytest.fixture(scope="module")
def tpl(plugins: Any) -> Any:
    """The ``olmoe`` template."""
    return get_template("olmoe", plugins)


@pytest.fixture(scope="module")
def records() -> list[dict]:
    """The reference corpus (a copy of the shared reference/conversations.jsonl)."""
    return load_records(DATA / "conversations.jsonl")


@pytest.fixture(scope="module")
def tokenizer(tpl: Any, records: list[dict]) -> Any:
    """A byte-level BPE with the template's special tokens and the official chat template."""
    texts = []
    for record in records:
        try:
            texts.append(tpl.render(record))
        except TemplateError:
            pass
    tok = build_test_tokenizer(tpl.spec.special_tokens, texts, chat_template=official_chat_template(tpl.spec),
                               eos_token=EOS)
    tok.bos_token = EOS  # as OLMoE's tokenizer: the Jinja renders it first
    return tok


def test_renders_like_official(tpl: Any, plugins: Any, records: list[dict]) -> None:
    official = official_chat_template("olmoe", plugins)
    assert official.startswith("{{ bos_token }}")
    rendered, raised, failures = compare_with_official(tpl, official, records, extra=TOKENS)
    assert not failures, "\n".join(failures)
    assert rendered >= len(records)  # most records in both modes; media and tool-call records raise on both sides
    assert raised > 0


def test_multi_turn_system_and_generation_prompt(tpl: Any, plugins: Any) -> None:
    record = {"messages": [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"}]}
    want = ("<|endoftext|><|system|>\nBe brief.\n<|user|>\nHi\n<|assistant|>\nHello<|endoftext|>\n"
            "<|user|>\n2+2?\n<|assistant|>\n4<|endoftext|>")
    assert tpl.render(record) == want
    prompt_only = {"messages": record["messages"][:4]}
    assert tpl.render(prompt_only, add_generation_prompt=True) == want[: want.rindex("4")]
    official = official_chat_template("olmoe", plugins)
    assert render_official(official, record, extra=TOKENS) == want


def test_what_the_official_template_lacks(tpl: Any) -> None:
    """No tool role (dropped), no tool calls or reasoning (ignored), string content only (else it raises)."""
    with_tool = {"messages": [{"role": "user", "content": "q"}, {"role": "tool", "content": "42"},
                              {"role": "assistant", "content": "a", "reasoning_content": "r"}]}
    assert tpl.render(with_tool) == "<|endoftext|><|user|>\nq\n<|assistant|>\na<|endoftext|>"
    with pytest.raises(TemplateError, match="string content only"):
        tpl.render({"messages": [{"role": "user", "content": [{"type": "image", "image": "a.png"}]}]})
    assert tpl.spec.supports == ("system",)


def test_labels_cover_assistant_turns(tpl: Any, tokenizer: Any, records: list[dict]) -> None:
    checked, failures = check_labels(tpl, tokenizer, records, EOS)
    assert not failures, "\n".join(failures)
    assert checked >= 20


def test_loss_is_the_reply_and_its_eos(tpl: Any, tokenizer: Any) -> None:
    record = {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "one"},
                           {"role": "user", "content": "b"}, {"role": "assistant", "content": "two"}]}
    enc = tpl.encode(tokenizer, record)
    assert loss_runs(enc.input_ids, enc.labels, tokenizer) == ["one<|endoftext|>", "two<|endoftext|>"]
    last = tpl.encode(tokenizer, record, loss_policy="last_round")
    assert loss_runs(last.input_ids, last.labels, tokenizer) == ["two<|endoftext|>"]


def test_jinja_fallback_trains_the_same_tokens(tpl: Any, tokenizer: Any, records: list[dict]) -> None:
    jinja = JinjaTemplate.from_tokenizer(tokenizer)
    compared = 0
    for record in records:
        try:
            ours = tpl.encode(tokenizer, record)
        except TemplateError:
            continue
        theirs = jinja.encode(tokenizer, record)
        assert theirs.input_ids == ours.input_ids, record["id"]
        assert theirs.labels == ours.labels, record["id"]
        compared += 1
    assert compared >= 25


def test_fast_encode_equals_offsets_path(tpl: Any, tokenizer: Any, records: list[dict]) -> None:
    compared, failures = compare_fast_and_slow(tpl, tokenizer, records)
    assert compared >= 10
    assert not failures, "\n".join(failures[:5])


def test_parse_response_stops_at_eos(tpl: Any) -> None:
    assert tpl.parse_response("Paris.<|endoftext|><|user|>")["content"] == "Paris."
