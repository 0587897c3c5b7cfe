"""Prompt rows, options, and the template path of prompts and completions (no training).

- prompt rows: a string, a message list, an SFT row (its reference reply dropped), ``system``; a row that is no
  prompt names its file and line; rows with different reward columns, or a column shadowing a reward keyword,
  are refused;
- options: every bad value is refused by ``GRPOOptions`` naming its flag, before anything is loaded;
- the prompt ids TRL generates from are the family template's ``encode(..., add_generation_prompt=True)`` ids
  (through ``SwiftGRPOTrainer._tokenize_prompts``), rollouts stop at the template's end-of-turn, and completions
  reach rewards decoded as a served reply: end-of-turn and padding gone, reasoning markers kept.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from swiftcore_data import DataError
from swiftcore_recipe_rl.data import load_prompt_rows
from swiftcore_recipe_rl.options import GRPOOptions

from swiftcore.api import SwiftcoreError


def _write(path: Path, rows: list[Any]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_prompt_rows_of_every_shape(tmp_path: Path) -> None:
    source = _write(
        tmp_path / "p.jsonl",
        [
            {"prompt": "2+3?", "answer": "5"},
            {"prompt": [{"role": "user", "content": "hi"}], "answer": "x", "system": "Be brief."},
            {
                "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "reference"}],
                "answer": "y",
            },
        ],
    )
    rows = load_prompt_rows([source])
    assert [r.record["messages"] for r in rows] == [
        [{"role": "user", "content": "2+3?"}],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
        [{"role": "user", "content": "q"}],
    ]
    assert [r.columns for r in rows] == [{"answer": "5"}, {"answer": "x"}, {"answer": "y"}]
    assert rows[0].where.endswith("p.jsonl:1")


def test_bad_prompt_rows_are_refused_naming_them(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"p\.jsonl:2: prompt: give 'prompt'"):
        load_prompt_rows([_write(tmp_path / "p.jsonl", [{"prompt": "a"}, {"question": "b"}])])
    with pytest.raises(DataError, match="must end with a user"):
        load_prompt_rows([_write(tmp_path / "q.jsonl", [{"prompt": [{"role": "assistant", "content": "a"}]}])])
    assert len(load_prompt_rows([str(tmp_path / "p.jsonl")], skip_bad_rows=True)) == 1
    with pytest.raises(SwiftcoreError, match="differ from the first row's"):
        load_prompt_rows([_write(tmp_path / "c.jsonl", [{"prompt": "a", "answer": "1"}, {"prompt": "b"}])])
    with pytest.raises(SwiftcoreError, match="'options' would shadow"):
        load_prompt_rows([_write(tmp_path / "o.jsonl", [{"prompt": "a", "options": "x"}])])


@pytest.mark.parametrize(
    ("kwargs", "flag"),
    [
        ({"reward": ()}, "--reward: name at least one"),
        ({"reward_option": ("format",)}, "--reward-option 'format'"),
        ({"reward_weight": ("format=x",)}, "--reward-weight 'format=x'"),
        ({"reward_weight": ("length=2",)}, "'length' is not one of the --reward values"),
        ({"grpo_loss_type": "ppo"}, "--grpo-loss-type"),
        ({"scale_rewards": "max"}, "--scale-rewards"),
        ({"num_generations": 1}, "--num-generations"),
        ({"max_completion_length": 0}, "--max-completion-length"),
        ({"rollout_temperature": 0.0}, "--rollout-temperature"),
        ({"rollout_top_p": 1.5}, "--rollout-top-p"),
        ({"rollout_top_k": -1}, "--rollout-top-k"),
        ({"grpo_beta": -0.1}, "--grpo-beta"),
        ({"grpo_epsilon_high": float("nan")}, "--grpo-epsilon-high"),
        ({"reward_fallback": float("inf")}, "--reward-fallback"),
    ],
)
def test_bad_options_are_refused_naming_the_flag(kwargs: dict, flag: str) -> None:
    values = {"reward": ("format",), **kwargs}
    with pytest.raises(ValueError, match=re.escape(flag)):
        GRPOOptions(**values)


def test_prompts_and_completions_go_through_the_family_template(
    grpo_trainer: Any, tiny_dir: Path, plugins: Any
) -> None:
    from swiftcore_recipe_rl.rollout import PromptCodec, stop_token_ids

    from swiftcore.api.models import load_tokenizer, resolve_model_spec
    from swiftcore.api.template import get_template

    spec = resolve_model_spec(str(tiny_dir), plugins)
    template = get_template(spec.default_template, plugins)
    tokenizer = load_tokenizer(str(tiny_dir))
    codec = PromptCodec(template, tokenizer)
    record = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+3?"}]}
    text, ids = codec.encode(record)
    assert ids == list(template.encode(tokenizer, record, add_generation_prompt=True).input_ids)
    assert text.endswith(template.render(record, add_generation_prompt=True)[-20:])
    grpo_trainer.prompt_ids = {text: ids}
    got, images, fields = grpo_trainer._tokenize_prompts([text, text])
    assert got == [ids, ids] and images is None and fields == {}

    vocab = tokenizer.get_vocab()
    end = vocab[template.stop_words[0]]
    assert end in stop_token_ids(template, tokenizer)
    reply = tokenizer("<think>\nhm\n</think>\n\nfive", add_special_tokens=False)["input_ids"]
    assert codec.decode([*reply, end, tokenizer.pad_token_id]) == "<think>\nhm\n</think>\n\nfive"


def test_rewards_run_concurrently_with_each_other(grpo_trainer: Any) -> None:
    """TRL gathers async reward functions; ours are async and score on worker threads, so two slow rewards
    take the time of one."""
    import asyncio
    import time

    from swiftcore_recipe_rl.rewards import TRLReward
    from swiftcore_train import Reward
    from trl.trainer.utils import is_async_callable

    from swiftcore.api import RewardSpec

    def slow(completions: list[str], **kwargs: Any) -> list[float]:
        time.sleep(0.5)
        return [1.0] * len(completions)

    codec = grpo_trainer.reward_funcs[0].codec
    rewards = [TRLReward(Reward(spec=RewardSpec(name=n, function="a.b:c"), function=slow), codec) for n in "ab"]
    assert all(is_async_callable(r) for r in rewards)

    async def both() -> list:
        return await asyncio.gather(*(r(prompts=["p"], completions=["c"], completion_ids=[[29]]) for r in rewards))

    start = time.perf_counter()
    assert asyncio.run(both()) == [[1.0], [1.0]]
    assert time.perf_counter() - start < 0.9
