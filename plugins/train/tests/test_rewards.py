"""Reward plugins: ``RewardSpec`` validation, the built-in rewards, and calling rewards without ever failing a run.

- a bad ``RewardSpec`` fails naming the field (and, through the registry, the plugin);
- ``accuracy`` (last ``\\boxed{}`` or last number vs the ``answer`` column), ``format`` (regex) and ``length``
  (DAPO soft overlong penalty) score as documented;
- a reward that raises (on the batch, or on some samples), returns NaN, a non-number or the wrong count costs
  only the samples concerned the fallback, with a logged error naming the reward and its provider;
- ``load_rewards`` finds a third party's reward by name (``name@plugin`` too), refuses unknown names with close
  matches, options a reward does not take, options of rewards not in the run, and a missing dataset column.

None of it imports torch.
"""

from __future__ import annotations

import logging
import math
import sys

import pytest
from swiftcore_train.rewards import (
    Reward,
    accuracy,
    extract_answer,
    format_match,
    length_penalty,
    load_rewards,
    parse_reward_options,
)

from swiftcore import hookimpl
from swiftcore.errors import SpecError, SwiftcoreError, UnknownNameError
from swiftcore.specs import RewardSpec

# ------------------------------------------------------------------------------------------------ the spec


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"name": "Bad Name", "function": "a.b:c"}, "name"),
        ({"name": "r"}, "function"),
        ({"name": "r", "function": "not a reference"}, "function"),
        ({"name": "r", "function": "a.b:c", "columns": ["answer"]}, "columns"),
        ({"name": "r", "function": "a.b:c", "columns": ("",)}, "columns"),
        ({"name": "r", "function": "a.b:c", "columns": ("prompts",)}, "columns"),
        ({"name": "r", "function": "a.b:c", "options": ("Pattern",)}, "options"),
        ({"name": "r", "function": "a.b:c", "options": ("a.b",)}, "options"),
    ],
)
def test_a_bad_reward_spec_names_its_field(kwargs: dict, field: str) -> None:
    with pytest.raises(SpecError) as info:
        RewardSpec(**kwargs)
    assert info.value.field == field, str(info.value)
    assert "RewardSpec" in str(info.value) and field in str(info.value)


def test_the_builtin_rewards_are_registered_without_torch() -> None:
    from swiftcore.api import load_plugins

    registry = load_plugins(["train"], env={"SWIFTCORE_PLUGINS": ""}).registry
    assert registry.names("reward") == ["accuracy", "format", "length"]
    assert registry.get("reward", "accuracy").columns == ("answer",)
    import subprocess

    code = (
        "import sys; from swiftcore.api import load_plugins; from swiftcore_train.rewards import load_rewards;"
        "load_rewards(load_plugins(['train'], env={'SWIFTCORE_PLUGINS': ''}), ['accuracy', 'format', 'length']);"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "[]", proc.stderr


def test_the_contract_checks_a_reward_function_against_reward_protocol() -> None:
    from swiftcore.api.protocols import REFERENCE_PROTOCOLS, RewardProtocol, conformance_problems

    expected = REFERENCE_PROTOCOLS[("reward", "function")]
    assert expected is RewardProtocol
    assert conformance_problems(format_match, expected, "reward 'format'") == []

    def no_kwargs(completions, answer=None):
        return [0.0]

    def no_args():
        return []

    assert "must take **kwargs" in conformance_problems(no_kwargs, expected, "r")[0]
    assert "cannot be called with 1 argument" in conformance_problems(no_args, expected, "r")[0]
    assert "expected a callable" in conformance_problems("text", expected, "r")[0]


# ------------------------------------------------------------------------------------------------ the built-ins


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("so the result is \\boxed{42}.", "42"),
        ("\\boxed{\\frac{1}{2}} and later \\boxed{7}", "7"),
        ("nested \\boxed{a_{1} + b}", "a_{1} + b"),
        ("first 3 then 1,250.5 at last", "1,250.5"),
        ("ratio 3/4", "3/4"),
        ("no answer here", None),
        ("truncated \\boxed{12", "12"),  # an unbalanced box is no answer: the last number is
    ],
)
def test_extract_answer(text: str, answer: str | None) -> None:
    assert extract_answer(text) == answer


def test_accuracy_compares_numbers_and_text() -> None:
    completions = ["\\boxed{1/2}", "it is 1250", "\\boxed{ Paris }", "\\boxed{3}", "nothing", "so $5.00."]
    gold = ["0.5", "1,250", "paris", "\\boxed{4}", "1", "5"]
    assert accuracy(completions, answer=gold) == [1.0, 1.0, 1.0, 0.0, 0.0, 1.0]


def test_format_uses_the_pattern_option_or_the_r1_layout() -> None:
    r1 = "<think>\nhmm\n</think>\n<answer>4</answer>"
    assert format_match([r1, "4"]) == [1.0, 0.0]
    assert format_match(["abc", "xbc"], options={"pattern": "^a"}) == [1.0, 0.0]


def test_length_is_dapos_soft_overlong_penalty() -> None:
    ids = [[0] * n for n in (4, 6, 7, 8, 9)]
    got = length_penalty(["x"] * 5, completion_ids=ids, options={"max": "8", "buffer": "4"})
    assert got == [0.0, -0.5, -0.75, -1.0, -1.0]
    assert length_penalty(["ab", "abcdefgh"], options={"max": "8", "buffer": "4"}) == [0.0, -1.0]  # characters


# ------------------------------------------------------------------------------------------------ faults


def _reward(function, fallback: float = -1.0) -> Reward:
    return Reward(spec=RewardSpec(name="r", function="a.b:c"), function=function, fallback=fallback)


def test_a_reward_raising_on_some_samples_costs_only_those(caplog: pytest.LogCaptureFixture) -> None:
    def picky(completions, *, answer, **kwargs):
        if any(c == "boom" for c in completions):
            raise RuntimeError("cannot score boom")
        return [float(a) for a in answer]

    reward = _reward(picky)
    with caplog.at_level(logging.ERROR, logger="swiftcore.rewards"):
        got = reward(["a", "boom", "c"], answer=[1, 2, 3], prompts=["p"] * 3)
    assert got == [1.0, -1.0, 3.0]
    assert reward.faults == 1
    text = caplog.text
    assert "reward 'r'" in text and "raised RuntimeError: cannot score boom on a batch of 3" in text
    assert "on sample 1; it gets the fallback reward -1.0" in text


def test_nan_inf_non_numbers_and_a_wrong_count_get_the_fallback(caplog: pytest.LogCaptureFixture) -> None:
    reward = _reward(lambda completions, **kw: [math.nan, math.inf, "x", None, 0.5])
    with caplog.at_level(logging.ERROR, logger="swiftcore.rewards"):
        assert reward(["a"] * 5) == [-1.0, -1.0, -1.0, -1.0, 0.5]
    assert reward.faults == 4
    assert caplog.text.count("gets the fallback reward -1.0") == 4

    short = _reward(lambda completions, **kw: [1.0])  # one score whatever the batch: right only for one sample
    assert short(["a", "b"]) == [1.0, 1.0]
    always = _reward(lambda completions, **kw: [1.0, 2.0, 3.0])
    assert always(["a", "b"]) == [-1.0, -1.0] and always.faults == 2


def test_a_reward_that_hangs_costs_its_batch_the_fallback_after_the_timeout(caplog: pytest.LogCaptureFixture) -> None:
    import threading
    import time

    release = threading.Event()

    def hangs(completions, **kwargs):
        release.wait(30)
        return [1.0] * len(completions)

    reward = Reward(spec=RewardSpec(name="slow", function="a.b:c"), function=hangs, fallback=-1.0, timeout=0.2)
    start = time.perf_counter()
    with caplog.at_level(logging.ERROR, logger="swiftcore.rewards"):
        got = reward(["a", "b", "c"])
    release.set()
    assert got == [-1.0, -1.0, -1.0] and reward.faults == 3
    assert time.perf_counter() - start < 5  # not one timeout per sample
    assert "reward 'slow' (None) did not return within 0.2 s (--reward-timeout) on a batch of 3" in caplog.text
    fast = Reward(spec=RewardSpec(name="fast", function="a.b:c"), function=lambda c, **kw: [2.0] * len(c), timeout=5)
    assert fast(["a"]) == [2.0]


def test_a_reward_gets_its_options_and_the_rows_columns() -> None:
    seen = {}

    def spy(completions, **kwargs):
        seen.update(kwargs)
        return [0.0] * len(completions)

    reward = Reward(spec=RewardSpec(name="r", function="a.b:c"), function=spy, options={"k": "v"})
    reward(["a", "b"], prompts=["p", "q"], answer=["1", "2"])
    assert seen == {"prompts": ["p", "q"], "answer": ["1", "2"], "options": {"k": "v"}}


# ------------------------------------------------------------------------------------------------ loading


def shout(completions, **kwargs):
    """A third party's reward (resolved as ``test_rewards:shout``)."""
    return [1.0 if c.isupper() else 0.0 for c in completions]


class AcmeRewards:
    SWIFTCORE_API = "1.2"

    @staticmethod
    @hookimpl
    def swiftcore_register_rewards():
        return [
            RewardSpec(name="shout", function=f"{__name__}:shout", options=("level",)),
            RewardSpec(name="format", function=f"{__name__}:shout"),  # a second 'format' provider
        ]


def test_load_rewards_finds_a_third_party_reward_and_refuses_what_it_cannot_run(
    swiftcore_plugins, register_plugin
) -> None:
    import swiftcore_train.plugin

    register_plugin(swiftcore_train.plugin, "train", distribution="swiftcore-train", version="0.1.0")
    register_plugin(AcmeRewards, "acme", distribution="acme-rewards", version="0.1")
    [reward] = load_rewards(swiftcore_plugins, ["shout"], options={"shout": {"level": "3"}}, fallback=-2.0)
    assert reward.spec.provider.plugin == "acme" and reward.options == {"level": "3"} and reward.fallback == -2.0
    assert reward(["HEY", "hey"]) == [1.0, 0.0]
    [builtin] = load_rewards(swiftcore_plugins, ["format@train"])
    assert builtin.spec.provider.plugin == "train"
    with pytest.raises(SwiftcoreError, match="'format' is provided by .* pick one with"):
        load_rewards(swiftcore_plugins, ["format"])
    with pytest.raises(UnknownNameError, match="reward called 'shuot'.*Did you mean: shout"):
        load_rewards(swiftcore_plugins, ["shuot"])
    with pytest.raises(SwiftcoreError, match=r"--reward-option shout.volume: reward 'shout' .* takes level"):
        load_rewards(swiftcore_plugins, ["shout"], options={"shout": {"volume": "9"}})
    with pytest.raises(SwiftcoreError, match=r"--reward-option length\.\*: 'length' is not one of this run's rewards"):
        load_rewards(swiftcore_plugins, ["shout"], options={"length": {"max": "9"}})
    with pytest.raises(SwiftcoreError, match="no reward"):
        load_rewards(swiftcore_plugins, [])
    with pytest.raises(SwiftcoreError, match="named twice"):
        load_rewards(swiftcore_plugins, ["shout", "shout"])
    [acc] = load_rewards(swiftcore_plugins, ["accuracy"])
    with pytest.raises(SwiftcoreError, match="reads column\\(s\\) 'answer', which the dataset does not have"):
        acc.check_columns(["question"])


def test_parse_reward_options() -> None:
    assert parse_reward_options(["format.pattern=^a=b", "length.max=8", "x@acme.k="]) == {
        "format": {"pattern": "^a=b"},
        "length": {"max": "8"},
        "x@acme": {"k": ""},
    }
    for bad in ("format", "pattern=x", ".k=v", "format.=v"):
        with pytest.raises(SwiftcoreError, match="expected REWARD.KEY=VALUE"):
            parse_reward_options([bad])
