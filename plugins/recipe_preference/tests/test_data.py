"""Preference rows: the three accepted formats parse to the same pair, and bad rows name file, line and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from swiftcore_data import DataError
from swiftcore_recipe_preference.data import load_pairs, parse_pair, split_pairs
from swiftcore_recipe_preference.options import DPOOptions, RMOptions

PROMPT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Colour of the sky?"}]
CHOSEN = {"role": "assistant", "content": "Blue."}
REJECTED = {"role": "assistant", "content": "Green."}

FORMATS = {
    "ms-swift": {"messages": [*PROMPT, CHOSEN], "rejected_response": "Green."},
    "trl-implicit-prompt": {"chosen": [*PROMPT, CHOSEN], "rejected": [*PROMPT, REJECTED]},
    "trl-explicit-prompt": {"prompt": PROMPT, "chosen": [CHOSEN], "rejected": [REJECTED]},
}


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_every_format_gives_the_same_pair(fmt: str) -> None:
    pair = parse_pair(FORMATS[fmt], "pairs.jsonl:1")
    assert pair.prompt["messages"] == PROMPT
    assert pair.chosen["content"] == "Blue." and pair.rejected["content"] == "Green."
    assert pair.record(pair.chosen)["messages"][-1]["content"] == "Blue."
    assert pair.record(pair.rejected)["_source"] == "pairs.jsonl:1"


def test_text_prompt_and_replies_are_one_user_and_assistant_turn() -> None:
    pair = parse_pair({"prompt": "2+2?", "chosen": "4", "rejected": "5"}, "x.jsonl:3")
    assert pair.prompt["messages"] == [{"role": "user", "content": "2+2?"}]
    assert (pair.chosen["role"], pair.chosen["content"]) == ("assistant", "4")


def test_tools_and_template_kwargs_stay_with_the_prompt() -> None:
    row = {**FORMATS["ms-swift"], "chat_template_kwargs": {"enable_thinking": False}}
    pair = parse_pair(row, "x.jsonl:1")
    assert pair.prompt["chat_template_kwargs"] == {"enable_thinking": False}


def _error(tmp_path: Path, rows: list, line: int) -> DataError:
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with pytest.raises(DataError) as info:
        load_pairs([str(path)])
    assert info.value.where == f"{path}:{line}", info.value
    print(info.value)
    return info.value


GOOD = FORMATS["ms-swift"]


def test_missing_rejected_names_file_line_and_field(tmp_path: Path) -> None:
    error = _error(tmp_path, [GOOD, {"messages": [*PROMPT, CHOSEN]}], line=2)
    assert error.field == "rejected_response" and "missing" in str(error)
    error = _error(tmp_path, [{"chosen": [*PROMPT, CHOSEN]}], line=1)
    assert error.field == "rejected" and "missing" in str(error)


def test_identical_chosen_and_rejected_are_refused(tmp_path: Path) -> None:
    error = _error(tmp_path, [GOOD, GOOD, {"messages": [*PROMPT, CHOSEN], "rejected_response": " Blue. "}], line=3)
    assert error.field == "rejected_response" and "identical" in str(error)
    error = _error(tmp_path, [{"prompt": "q", "chosen": "same", "rejected": "same"}], line=1)
    assert error.field == "rejected" and "identical" in str(error)


def test_other_bad_rows(tmp_path: Path) -> None:
    other_prompt = [{"role": "user", "content": "Another question?"}, REJECTED]
    error = _error(tmp_path, [{"chosen": [*PROMPT, CHOSEN], "rejected": other_prompt}], line=1)
    assert error.field == "rejected" and "prompt turns differ" in str(error)
    error = _error(tmp_path, [{"messages": PROMPT, "rejected_response": "x"}], line=1)
    assert error.field == "messages[1]" and "assistant" in str(error)
    error = _error(tmp_path, [{"text": "hello"}], line=1)
    assert "not a preference row" in str(error)
    # The prompt goes through swiftcore's own row checks (here: an unknown role).
    error = _error(tmp_path, [{"messages": [{"role": "bot", "content": "x"}, CHOSEN], "rejected_response": "y"}], 1)
    assert error.field == "messages[0].role", error


def test_skip_bad_rows_keeps_the_good(tmp_path: Path) -> None:
    path = tmp_path / "mixed.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps({"messages": [*PROMPT, CHOSEN]}) + "\n", encoding="utf-8")
    assert len(load_pairs([str(path)], skip_bad_rows=True)) == 1


def test_split_is_seeded_and_disjoint() -> None:
    pairs = [parse_pair({"prompt": f"q{i}", "chosen": "a", "rejected": "b"}, f"x:{i}") for i in range(20)]
    train, val = split_pairs(pairs, 0.2, seed=1)
    assert len(val) == 4 and len(train) == 16
    assert {p.where for p in train}.isdisjoint(p.where for p in val)
    assert [p.where for p in split_pairs(pairs, 0.2, seed=1)[1]] == [p.where for p in val]


def test_options_are_checked_before_anything_runs() -> None:
    assert DPOOptions(loss_type="ipo,sft", loss_weights=("1", "0.5")).loss_type == ("ipo", "sft")
    with pytest.raises(ValueError, match="--loss-type"):
        DPOOptions(loss_type=("sigmoid", "nope"))
    with pytest.raises(ValueError, match="--beta"):
        DPOOptions(beta=0.0)
    with pytest.raises(ValueError, match="--loss-weights"):
        DPOOptions(loss_type=("sigmoid",), loss_weights=(1.0, 2.0))
    with pytest.raises(ValueError, match="--center-rewards-coefficient"):
        RMOptions(center_rewards_coefficient=-1.0)
