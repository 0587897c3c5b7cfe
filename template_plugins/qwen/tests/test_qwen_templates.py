"""The qwen templates reproduce the official Jinja byte for byte and train the right tokens."""

from __future__ import annotations

from typing import Any

import pytest
from swiftcore_testing import check_labels, compare_with_official, loss_runs

from swiftcore.template import JinjaTemplate, TemplateError, get_template, official_chat_template

NAMES = ("qwen3", "qwen3_5", "qwen3_asr")


@pytest.mark.parametrize("name", NAMES)
def test_renders_like_official(name: str, plugins: Any, records: list[dict]) -> None:
    tpl = get_template(name, plugins)
    official = official_chat_template(name, plugins)
    assert official and official.startswith("{%")
    rendered, _raised, failures = compare_with_official(tpl, official, records)
    assert not failures, "\n".join(failures)
    assert rendered >= len(records)  # most records render in both modes; the rest raise on both sides


@pytest.mark.parametrize("name", NAMES)
def test_labels_cover_assistant_turns(name: str, plugins: Any, records: list[dict], tokenizers: dict) -> None:
    tpl = get_template(name, plugins)
    checked, failures = check_labels(tpl, tokenizers[name], records, "<|im_end|>", forbidden=("<|im_start|>",))
    assert not failures, "\n".join(failures)
    assert checked >= 20


@pytest.mark.parametrize("name", ("qwen3", "qwen3_5"))
def test_jinja_fallback_trains_the_same_tokens(name: str, plugins: Any, records: list[dict],
                                               tokenizers: dict) -> None:
    tpl = get_template(name, plugins)
    tok = tokenizers[name]
    jinja = JinjaTemplate.from_tokenizer(tok)
    compared = 0
    for record in records:
        try:
            ours = tpl.encode(tok, record)
        except TemplateError:
            with pytest.raises(TemplateError):
                jinja.encode(tok, record)
            continue
        theirs = jinja.encode(tok, record)
        assert theirs.input_ids == ours.input_ids, record["id"]
        assert theirs.labels == ours.labels, (
            f"{record['id']}: python {loss_runs(ours.input_ids, ours.labels, tok)!r} vs "
            f"jinja {loss_runs(theirs.input_ids, theirs.labels, tok)!r}"
        )
        compared += 1
    assert compared >= 25


def test_enable_thinking_per_sample_in_one_batch(plugins: Any, tokenizers: dict) -> None:
    tpl = get_template("qwen3_5", plugins)
    base = {"messages": [{"role": "user", "content": "Hi"}]}
    batch = [{**base, "chat_template_kwargs": {"enable_thinking": flag}} for flag in (True, False, True)]
    encoded = tpl.encode_batch(tokenizers["qwen3_5"], batch, add_generation_prompt=True)
    assert encoded[0].text.endswith("<|im_start|>assistant\n<think>\n")
    assert encoded[1].text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert encoded[2].text == encoded[0].text
    assert all(label == -100 for enc in encoded for label in enc.labels)


def test_thinking_off_trains_only_the_answer(plugins: Any, tokenizers: dict) -> None:
    tpl = get_template("qwen3_5", plugins)
    tok = tokenizers["qwen3_5"]
    record = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}
    inferred = tpl.encode(tok, record)  # a reply without reasoning is the non-thinking form
    on = tpl.encode(tok, {**record, "chat_template_kwargs": {"enable_thinking": True}})
    off = tpl.encode(tok, {**record, "chat_template_kwargs": {"enable_thinking": False}})
    assert on.text == off.text == inferred.text  # the rendering does not depend on the flag ...
    assert loss_runs(on.input_ids, on.labels, tok) == ["\n</think>\n\nHello<|im_end|>"]
    assert loss_runs(off.input_ids, off.labels, tok) == ["Hello<|im_end|>"]  # ... what is generated does
    assert inferred.labels == off.labels
    thought = {"messages": [record["messages"][0], {**record["messages"][1], "reasoning_content": "greet"}]}
    assert loss_runs(*(lambda e: (e.input_ids, e.labels))(tpl.encode(tok, thought)), tok) == [
        "greet\n</think>\n\nHello<|im_end|>"]  # one with reasoning is the thinking form


def test_loss_policies(plugins: Any, tokenizers: dict) -> None:
    tpl = get_template("qwen3", plugins)
    tok = tokenizers["qwen3"]
    record = {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "one"},
                           {"role": "user", "content": "b"}, {"role": "assistant", "content": "two"}]}
    everything = tpl.encode(tok, record, loss_policy="all")
    assert everything.labels == everything.input_ids
    last = tpl.encode(tok, record, loss_policy="last_round")
    assert [r.split("</think>")[-1].strip() for r in loss_runs(last.input_ids, last.labels, tok)] == [
        "two<|im_end|>"]
    with pytest.raises(TemplateError, match="loss_policy"):
        tpl.encode(tok, record, loss_policy="everything")


def test_media_positions_and_truncation(plugins: Any, tokenizers: dict) -> None:
    tpl = get_template("qwen3_5", plugins)
    tok = tokenizers["qwen3_5"]
    record = {"messages": [
        {"role": "user", "content": [{"type": "image", "image": "a.png"}, {"type": "text", "text": "and"},
                                     {"type": "image", "image": "b.png"}, {"type": "text", "text": "compare"}]},
        {"role": "assistant", "content": "same"}]}
    enc = tpl.encode(tok, record)
    assert [m.item["image"] for m in enc.media] == ["a.png", "b.png"]
    for m in enc.media:
        assert tok.decode(enc.input_ids[m.start:m.end]) == "<|vision_start|><|image_pad|><|vision_end|>"
    first = enc.media[0]
    # a left cut that lands inside the first placeholder drops it whole
    cut_inside = len(enc) - (first.start + 1)
    short = tpl.encode(tok, record, max_length=cut_inside, truncation="truncate_left")
    assert len(short) == len(enc) - first.end
    assert [m.item["image"] for m in short.media] == ["b.png"]
    second = short.media[0]
    assert tok.decode(short.input_ids[second.start:second.end]).startswith("<|vision_start|>")
    assert tpl.encode(tok, record, max_length=5, truncation="drop") is None
    with pytest.raises(TemplateError, match="max_length=5"):
        tpl.encode(tok, record, max_length=5)


def test_official_errors_become_template_errors(plugins: Any) -> None:
    tpl = get_template("qwen3_5", plugins)
    with pytest.raises(TemplateError, match="System message must be at the beginning"):
        tpl.render({"messages": [{"role": "user", "content": "a"}, {"role": "system", "content": "s"}]})
    with pytest.raises(TemplateError, match="No user query"):
        tpl.render({"messages": [{"role": "system", "content": "s"}]})
    with pytest.raises(TemplateError, match="Unexpected item type"):
        tpl.render({"id": "x", "messages": [{"role": "user", "content": [{"type": "audio", "audio": "a.wav"}]}]})


def test_parse_response_round_trips_tool_calls(plugins: Any, records: list[dict]) -> None:
    for name in ("qwen3", "qwen3_5"):
        tpl = get_template(name, plugins)
        record = next(r for r in records if "parallel" in r["tags"])
        answer = next(m for m in record["messages"] if m.get("tool_calls"))
        text = tpl.render({"messages": [*record["messages"][:2], answer]})
        generated = text.split("<|im_start|>assistant\n", 1)[1]
        parsed = tpl.parse_response(generated)
        got = [(c["function"]["name"], c["function"]["arguments"]) for c in parsed["tool_calls"]]
        import json

        want = [(c["function"]["name"], c["function"]["arguments"]) for c in answer["tool_calls"]]
        want = [(n, json.loads(a) if isinstance(a, str) else a) for n, a in want]
        assert [(n, json.loads(a)) for n, a in got] == want, name
        assert parsed["content"] == ""
