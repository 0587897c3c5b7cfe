"""deepseek_v4 equals the official golden pairs and the reference renderings of the corpus."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from swiftcore_testing import build_test_tokenizer, check_labels, generation_record, load_records, loss_runs

import swiftcore
from swiftcore.template import TemplateError, get_template

DATA = Path(__file__).parent / "data"
GOLDEN = [(1, "thinking"), (2, "thinking"), (3, "thinking"), (4, "chat")]  # modes as in ENCODING.md


@pytest.fixture(scope="module")
def tpl() -> Any:
    return get_template("deepseek_v4", swiftcore.load_plugins(["swiftcore-template-deepseek"]))


@pytest.fixture(scope="module")
def records() -> dict[str, dict]:
    return {r["id"]: r for r in load_records(DATA / "conversations.jsonl")}


def _golden(n: int, mode: str) -> dict:
    record = json.loads((DATA / f"test_input_{n}.json").read_text(encoding="utf-8"))
    record = {"messages": record} if isinstance(record, list) else record
    return {**record, "chat_template_kwargs": {"thinking_mode": mode}}


@pytest.mark.parametrize(("n", "mode"), GOLDEN)
def test_golden_pairs(tpl: Any, n: int, mode: str) -> None:
    expected = (DATA / f"test_output_{n}.txt").read_text(encoding="utf-8")
    assert tpl.render(_golden(n, mode)) == expected


def test_corpus_renderings(tpl: Any, records: dict) -> None:
    rows = load_records(DATA / "conversations_expected.jsonl")
    assert len(rows) == 30
    for row in rows:
        prompt_mode = row["mode"] == "prompt"
        record = generation_record(records[row["id"]]) if prompt_mode else records[row["id"]]
        assert tpl.render(record, add_generation_prompt=prompt_mode) == row["text"], (row["id"], row["mode"])


def test_media_is_refused_clearly(tpl: Any, records: dict) -> None:
    with pytest.raises(TemplateError, match=r"record 's1-009', message 0: deepseek_v4 is text-only"):
        tpl.render(records["s1-009"])


def test_drop_thinking_and_reasoning_effort(tpl: Any) -> None:
    record = _golden(2, "thinking")
    kept = tpl.render({**record, "chat_template_kwargs": {"thinking_mode": "thinking", "drop_thinking": False}})
    assert "<think>The user said hello, I should greet back.</think>Hi there!" in kept
    dropped = tpl.render(record)
    assert "greet back" not in dropped and "<｜Assistant｜></think>Hi there!" in dropped
    effort = tpl.render({**record, "chat_template_kwargs": {"thinking_mode": "thinking", "reasoning_effort": "max"}})
    assert effort.startswith("<｜begin▁of▁sentence｜>Reasoning Effort: Absolute maximum")
    assert effort.endswith(dropped.removeprefix("<｜begin▁of▁sentence｜>"))
    chat = tpl.render({**record, "chat_template_kwargs": {"reasoning_effort": "max"}})
    assert "Reasoning Effort" not in chat  # the preamble belongs to thinking mode only
    with pytest.raises(TemplateError, match="reasoning_effort"):
        tpl.render({**record, "chat_template_kwargs": {"reasoning_effort": "extreme"}})


def test_a_malformed_json_parameter_is_kept_as_written(tpl: Any) -> None:
    """A tiny model can write a ``string="false"`` parameter that is not JSON: the parser keeps its text (it raised
    JSONDecodeError, which a served model turned into a 500)."""
    dsml = "｜DSML｜"
    text = (f'Let me add.\n\n<{dsml}tool_calls>\n<{dsml}invoke name="add">\n'
            f'<{dsml}parameter name="a" string="false">3</{dsml}parameter>\n'
            f'<{dsml}parameter name="b" string="false">{{4,</{dsml}parameter>\n'
            f'</{dsml}invoke>\n</{dsml}tool_calls><｜end▁of▁sentence｜>')
    parsed = tpl.parse_response(text)
    assert parsed["content"] == "Let me add."
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed["tool_calls"]] == [
        ("add", {"a": 3, "b": "{4,"})]


def test_labels_and_tool_call_round_trip(tpl: Any) -> None:
    record = _golden(1, "thinking")
    tok = build_test_tokenizer(tpl.spec.special_tokens, [tpl.render(record)], eos_token="<｜end▁of▁sentence｜>")
    enc = tpl.encode(tok, record)
    runs = loss_runs(enc.input_ids, enc.labels, tok)
    assert len(runs) == 2 and all(run.endswith("<｜end▁of▁sentence｜>") for run in runs)
    assert runs[0].startswith("The user wants to know the weather in Beijing.")
    assert "<tool_result>" not in "".join(runs) and "<｜Assistant｜>" not in "".join(runs)
    parsed = tpl.parse_response(runs[0])
    assert parsed["reasoning_content"].startswith("The user wants")
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed["tool_calls"]] == [
        ("get_weather", {"location": "Beijing", "unit": "celsius"})]
    checked, failures = check_labels(tpl, tok, [_golden(2, "chat"), _golden(4, "chat")], "<｜end▁of▁sentence｜>",
                                     forbidden=("<｜User｜>", "<｜Assistant｜>"))
    assert checked == 2 and not failures, failures
