"""The template engine: normalisation, the jinja fallback's loss masks, encoding and truncation."""

from __future__ import annotations

from typing import Any

import pytest
from swiftcore_testing.templates import build_test_tokenizer, loss_runs

import swiftcore
from swiftcore.errors import UnknownNameError
from swiftcore.template import (
    Conversation,
    JinjaTemplate,
    Segment,
    Template,
    TemplateError,
    get_template,
    normalize_record,
)
from swiftcore.template.pieces import media, prompt, strip_pieces

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
MARKED = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.role == 'assistant' %}{% generation %}"
    "{{ m.content }}<|im_end|>{% endgeneration %}{% else %}{{ m.content }}<|im_end|>{% endif %}\n{% endfor %}"
)
SPECIAL = ("<|im_start|>", "<|im_end|>", "<img>")
RECORD = {"id": "r1", "messages": [
    {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"},
    {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"},
    {"role": "assistant", "content": "Goodbye."}]}


@pytest.fixture(scope="module")
def tok() -> Any:
    return build_test_tokenizer(SPECIAL, ["Hi there Hello! Bye Goodbye. Be brief. look at this"],
                                chat_template=CHATML, eos_token="<|im_end|>")


def test_normalize_parses_json_arguments_and_joins_text_parts() -> None:
    record = {"messages": [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": '{"x": 1}'}}]}]}
    conv = normalize_record(record)
    assert conv.messages[0]["content"] == "ab"
    assert conv.messages[1]["tool_calls"][0]["function"]["arguments"] == {"x": 1}
    assert record["messages"][1]["tool_calls"][0]["function"]["arguments"] == '{"x": 1}'  # input untouched


def test_normalize_names_the_bad_message() -> None:
    call = {"function": {"name": "f", "arguments": "{"}}
    bad = {"id": "z", "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [call]}]}
    with pytest.raises(TemplateError, match=r"record 'z', message 1: tool call 'f'.*not valid JSON"):
        normalize_record(bad)
    with pytest.raises(TemplateError, match="'role'"):
        normalize_record({"messages": [{"content": "no role"}]})


def test_jinja_is_a_builtin_template() -> None:
    plugins = swiftcore.load_plugins([])
    assert isinstance(get_template("jinja", plugins), JinjaTemplate)
    with pytest.raises(UnknownNameError, match="no loaded plugin provides a template called 'nope'"):
        get_template("nope", plugins)


def test_jinja_needs_a_chat_template() -> None:
    with pytest.raises(TemplateError, match="tokenizer's chat_template"):
        JinjaTemplate().render(RECORD)


def test_jinja_prefix_rendering_trains_assistant_content_and_end_token(tok: Any) -> None:
    enc = JinjaTemplate().encode(tok, RECORD)
    assert enc.text == tok.apply_chat_template(RECORD["messages"], tokenize=False)
    assert enc.input_ids == tok(enc.text, add_special_tokens=False)["input_ids"]
    assert loss_runs(enc.input_ids, enc.labels, tok) == ["Hello!<|im_end|>", "Goodbye.<|im_end|>"]
    last = JinjaTemplate().encode(tok, RECORD, loss_policy="last_round")
    assert loss_runs(last.input_ids, last.labels, tok) == ["Goodbye.<|im_end|>"]


def test_jinja_generation_markers_define_the_loss(tok: Any) -> None:
    enc = JinjaTemplate(MARKED).encode(tok, RECORD)
    assert loss_runs(enc.input_ids, enc.labels, tok) == ["Hello!<|im_end|>", "Goodbye.<|im_end|>"]


class _Toy(Template):
    """A template with media placeholders, to test encoding without a plugin."""

    def generation_prompt(self, conv: Conversation) -> str:
        return "A:"

    def segments(self, conv: Conversation, add_generation_prompt: bool) -> list[Segment]:
        out: list[Segment] = []
        for i, m in enumerate(conv.messages):
            if m["role"] == "user":
                out.append(prompt("U:", i))
                for part in m["content"]:
                    out.append(media("<img><img><img>", "image", part, i) if part.get("type") == "image"
                               else prompt(part["text"], i))
                out.append(prompt("\n", i))
            else:
                out.append(Segment("A:" + m["content"] + "<|im_end|>", "assistant", i))
        return out


def test_truncation_keeps_placeholders_whole(tok: Any) -> None:
    record = {"messages": [
        {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image", "image": "x"},
                                     {"type": "text", "text": "at this"}]},
        {"role": "assistant", "content": "Hello!"}]}
    toy = _Toy()
    full = toy.encode(tok, record)
    (img,) = full.media
    assert img.end - img.start == 3 and img.text == "<img><img><img>"
    right = toy.encode(tok, record, max_length=img.start + 1, truncation="truncate_right")
    assert len(right) == img.start and right.media == []
    left = toy.encode(tok, record, max_length=len(full) - img.start, truncation="truncate_left")
    assert left.media and left.media[0].start == 0 and left.input_ids[0:3] == full.input_ids[img.start:img.end]
    assert loss_runs(full.input_ids, full.labels, tok) == ["Hello!<|im_end|>"]  # "A:" is the generation prompt


def test_strip_pieces_is_jinja_trim_across_pieces() -> None:
    pieces = [prompt("  a "), media("<img>", "image", {}, 0), prompt(" b  ")]
    assert "".join(p.text for p in strip_pieces(pieces)) == "a <img> b"
    assert strip_pieces(pieces)[1].kind == "media"
