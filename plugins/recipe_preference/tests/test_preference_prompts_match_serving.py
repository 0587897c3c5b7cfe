"""The prompt a preference pair is trained after is, token for token, the prompt serving renders for that point of the
conversation: the engine's ``SampleEncoder.prompt`` (``add_generation_prompt=True``, in the reply's thinking mode) and
the official Jinja template's rendering (DeepSeek-V4 has no Jinja; its template is golden-tested against its
``ENCODING.md``).

Checked for every family with a template, on multi-turn rows: earlier turns, reasoning in the history, and (for a
template with a tool format) tool calls and their results before the compared reply. The compared reply after a tool
result is the last round of a multi-round reply: ``last_round`` trains the call rounds too, and Gemma 4 renders the
call's turn with the empty thought channel of the generation prompt in training but not in the history serving
renders; the encoders take the template's ``training_rounds`` last record, as SFT does. Every encoder is checked:
``encode_dpo_pairs`` (dpo, mpo, cpo, simpo, orpo), ``encode_kto_examples`` (kto) and ``encode_rm_pairs`` (rm).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from swiftcore_recipe_preference.data import parse_pair, parse_unpaired
from swiftcore_recipe_preference.encoding import encode_dpo_pairs, encode_kto_examples, encode_rm_pairs
from swiftcore_testing import ADD_TOOL
from swiftcore_train import TrainConfig

FAMILIES = ["qwen3_5", "gemma4", "deepseek_v4", "glm5", "mimo_v2_flash", "olmoe"]


def _call(i: int, a: int, b: int, reasoning: str | None = None) -> dict[str, Any]:
    function = {"name": "add", "arguments": json.dumps({"a": a, "b": b})}
    call = {"id": f"call_{i}", "type": "function", "function": function}
    message: dict[str, Any] = {"role": "assistant", "content": "", "tool_calls": [call]}
    return {**message, "reasoning_content": reasoning} if reasoning else message


def _result(i: int, value: int) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": f"call_{i}", "content": str(value)}


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _reply(text: str, reasoning: str | None = None) -> dict[str, Any]:
    return {"role": "assistant", "content": text, **({"reasoning_content": reasoning} if reasoning else {})}


#: name -> (prompt messages, chosen, rejected, uses tools)
CASES: dict[str, tuple[list[dict], dict, dict, bool]] = {
    "multi_turn": ([_user("hi"), _reply("hello"), _user("say apple")], _reply("apple"), _reply("pear"), False),
    "reasoning_in_history": (
        [_user("hi"), _reply("hello", "greet back"), _user("say apple")],
        _reply("apple", "a fruit"),
        _reply("pear", "another fruit"),
        False,
    ),
    "after_tool_result": ([_user("3 plus 4?"), _call(0, 3, 4), _result(0, 7)], _reply("7"), _reply("8"), True),
    "after_two_tool_rounds": (
        [_user("3 plus 4 plus 5?"), _call(0, 3, 4), _result(0, 7), _call(1, 7, 5), _result(1, 12)],
        _reply("12"),
        _reply("13"),
        True,
    ),
    "after_tool_result_thinking": (
        [_user("3 plus 4?"), _call(0, 3, 4, "use add"), _result(0, 7)],
        _reply("7", "the tool said 7"),
        _reply("8", "a guess"),
        True,
    ),
    "a_call_after_tool_result": (
        [_user("3 plus 4 plus 5?"), _call(0, 3, 4), _result(0, 7)],
        _call(1, 7, 5),
        _reply("7"),
        True,
    ),
    "tool_loop_then_user": (
        [_user("3 plus 4?"), _call(0, 3, 4), _result(0, 7), _reply("7"), _user("thanks")],
        _reply("welcome"),
        _reply("go away"),
        True,
    ),
}


@pytest.fixture(scope="module")
def family_setup(tiny_model_dir: Any, plugins: Any) -> Callable[[str], tuple[Any, Any, Any, TrainConfig]]:
    """Per family: the template, its spec, the tokenizer and a run config (built once per family)."""
    from swiftcore.api.models import load_tokenizer, resolve_model_spec
    from swiftcore.api.template import get_template

    made: dict[str, Any] = {}

    def setup(family: str) -> tuple[Any, Any, Any, TrainConfig]:
        if family not in made:
            model_dir = str(tiny_model_dir(family))
            spec = resolve_model_spec(model_dir, plugins)
            made[family] = (
                get_template(spec.default_template, plugins),
                plugins.registry.get("template", spec.default_template),
                load_tokenizer(model_dir),
                TrainConfig(model=model_dir, dataset=("x",)),
            )
        return made[family]

    return setup


def _serving_prompt(template: Any, template_spec: Any, tokenizer: Any, record: dict[str, Any]) -> list[int]:
    """The engine's prompt ids for ``record`` (add_generation_prompt=True), checked against the official Jinja."""
    from swiftcore.api.template import SampleEncoder, normalize_record, official_chat_template, render_official

    ids, _ = SampleEncoder(template, tokenizer).prompt(record)
    official = official_chat_template(template_spec)
    if official is not None:
        extra = {"bos_token": tokenizer.bos_token, "eos_token": tokenizer.eos_token}
        text = render_official(official, normalize_record(record), True, extra=extra)
        assert tokenizer(text, add_special_tokens=False)["input_ids"] == ids, f"engine prompt != official:\n{text!r}"
    return ids


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("family", FAMILIES)
def test_preference_prompt_is_the_serving_prompt(family: str, case: str, family_setup: Any) -> None:
    from swiftcore.api.template import SampleEncoder

    template, template_spec, tokenizer, cfg = family_setup(family)
    prompt, chosen, rejected, uses_tools = CASES[case]
    if uses_tools and "tools" not in template_spec.supports:
        pytest.skip(f"{family}'s template has no tool format: the preference recipes refuse tool rows for it")
    row = {"prompt": prompt, "chosen": [chosen], "rejected": [rejected]}
    if uses_tools:
        row["tools"] = [ADD_TOOL]
    pair = parse_pair(row, f"{case}.jsonl:1")
    request = dict(pair.prompt)
    mode = template.thinking_mode(pair.record(pair.chosen))  # the reply's thinking mode: the one it is trained in
    if mode is not None:
        request["chat_template_kwargs"] = {"enable_thinking": mode}
    served = _serving_prompt(template, template_spec, tokenizer, request)

    [dpo] = encode_dpo_pairs([pair], template, tokenizer, cfg)
    assert tokenizer.decode(dpo["prompt_ids"]) == tokenizer.decode(served)  # a readable diff first
    assert dpo["prompt_ids"] == served
    assert dpo["chosen_ids"] and dpo["rejected_ids"] and dpo["chosen_ids"] != dpo["rejected_ids"]
    # the chosen reply is the last round SFT trains on the same conversation, after the same prompt
    sft = SampleEncoder(template, tokenizer).train_samples(
        [pair.record(pair.chosen)], loss_policy="last_round", max_length=4096, truncation="error"
    )[-1]
    loss = [i for i, label in enumerate(sft["labels"]) if label != -100]
    start = next(i for i in reversed(loss) if i - 1 not in loss)
    assert sft["input_ids"][:start] == served and sft["input_ids"][start : loss[-1] + 1] == dpo["chosen_ids"]

    desirable, undesirable = encode_kto_examples(parse_unpaired(row, f"{case}.jsonl:1"), template, tokenizer, cfg)
    assert desirable["prompt_ids"] == undesirable["prompt_ids"] == served
    assert (desirable["completion_ids"], undesirable["completion_ids"]) == (dpo["chosen_ids"], dpo["rejected_ids"])

    [rm] = encode_rm_pairs([pair], template, tokenizer, cfg)
    for whole, reply in ((rm["chosen_ids"], dpo["chosen_ids"]), (rm["rejected_ids"], dpo["rejected_ids"])):
        assert whole[: len(served) + len(reply)] == served + reply  # the scored conversation: that prompt, that reply
