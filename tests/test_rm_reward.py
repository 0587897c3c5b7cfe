"""A reward model trained by ``--recipe rm`` as an RL reward (``--reward reward_model``, swiftcore-recipe-rl).

- The reward scores a rollout on the ids the policy produced (prompt ids + completion ids with their stop token);
  those are exactly the ids the ``rm`` recipe encodes the same conversation into, so the reward equals the
  checkpoint's own score of the training-format pair (to 1e-5);
- in a real GRPO step the logged ``rewards/reward_model/mean`` is the mean of the checkpoint's scores of the
  step's rollouts, and a missing ``path`` costs the fallback with a logged error, never the run;
- the chat-template defaults are the reward model's (its run's ``--disable-thinking``, from its manifest), not the
  policy's: a policy run with ``--enable-thinking`` gets exactly the checkpoint's score of its own training-style
  encoding, and a prompt row's own ``chat_template_kwargs`` still apply on top;
- with ``--environment`` the reward scores the whole episode (the prompt with its tools, each tool call and tool
  result, the final reply), exactly as the checkpoint scores the rm recipe's encoding of that conversation, not the
  prompt + final reply alone.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("swiftcore_recipe_rl")
pytest.importorskip("swiftcore_recipe_preference")

QUESTION = [{"role": "user", "content": "Name a vowel."}]


@pytest.fixture(scope="module")
def plugins() -> Any:
    from swiftcore.api import load_plugins

    return load_plugins(env={})


@pytest.fixture(scope="module")
def rm_checkpoint(tiny_model_dir: Any, plugins: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A reward model of the tiny Qwen3.5, trained for 4 steps by the ``rm`` recipe."""
    from swiftcore_recipe_preference.rm import run_rm
    from swiftcore_train import TrainConfig

    work = tmp_path_factory.mktemp("rm")
    rows = [{"prompt": QUESTION, "chosen": v, "rejected": c} for v, c in zip("aeiou", "bcdfg", strict=True)]
    data = work / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = TrainConfig(model=str(tiny_model_dir("qwen3_5")), dataset=(str(data),), output_dir=str(work / "run"),
                      recipe="rm", tuner="full", max_steps=4, batch_size=5, learning_rate=1e-3, save_steps=10_000,
                      plot=False, enable_thinking=False)  # fmt: skip
    return Path(run_rm(cfg, plugins).last_checkpoint)


def _rm_encoding(
    checkpoint: Path, plugins: Any, replies: list[str], prompt: list[dict] = QUESTION, **row: Any
) -> list[list[int]]:
    """The ``rm`` recipe's own encoding of each reply after ``prompt`` (its training pairs' chosen side), with the
    reward model's run options (``--disable-thinking``); ``row``: more columns of each pair
    (``chat_template_kwargs``, ``tools``); a prompt may end in a tool call and its result (an episode's)."""
    from swiftcore_recipe_preference.data import parse_pair
    from swiftcore_recipe_preference.encoding import encode_rm_pairs
    from swiftcore_train import TrainConfig

    from swiftcore.api.models import load_tokenizer
    from swiftcore.api.template import get_template

    tokenizer, template = load_tokenizer(str(checkpoint)), get_template("qwen3_5", plugins)
    cfg = TrainConfig(model=str(checkpoint), dataset=("unused",), max_length=1024, enable_thinking=False)
    rows = [{"prompt": prompt, "chosen": r, "rejected": "x", **row} for r in replies]
    pairs = [parse_pair(row, f"pair {i}") for i, row in enumerate(rows)]
    return [sample["chosen_ids"] for sample in encode_rm_pairs(pairs, template, tokenizer, cfg)]


def _grpo_step(
    tiny_model_dir: Any,
    plugins: Any,
    data: Path,
    out: Path,
    options: dict[str, str],
    enable_thinking: bool,
    replies: list[str] | None = None,
    turns: list[list[str]] | None = None,
    max_length: int = 512,
    **grpo_options: Any,
) -> tuple[list[dict], dict[str, Any]]:
    """One GRPO step of the tiny Qwen3.5 rewarded by ``reward_model`` (``options``: its ``--reward-option`` values):
    the run's log records and the step's rollout batch (``_generate_and_score_completions``' output, the prompt ids
    the policy generated from as ``prompt_ids``, and the reward values, one list per completion, as ``rewards``).
    ``replies``: the completions, scripted (each ended by the stop token), instead of the tiny model's own;
    ``turns``: the completions of each generation call in turn, scripted (a multi-turn episode's later replies come
    from later calls); ``grpo_options``: more :class:`GRPOOptions` (``environment``...)."""
    from swiftcore_recipe_rl import trainer as trainer_module
    from swiftcore_recipe_rl.options import GRPOOptions
    from swiftcore_recipe_rl.recipe import run
    from swiftcore_train import TrainConfig

    seen: dict[str, Any] = {}
    cls = trainer_module.grpo_trainer_class()
    real_score = cls._generate_and_score_completions

    def score(self: Any, inputs: Any) -> Any:
        batch = real_score(self, inputs)
        seen.setdefault("out", batch)
        return batch

    real_generate = cls._generate_single_turn

    real_rewards = cls._calculate_rewards

    def rewards(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = real_rewards(self, *args, **kwargs)
        seen.setdefault("rewards", out.tolist())
        return out

    def generate(self: Any, prompt_ids: Any, *args: Any, **kwargs: Any) -> Any:
        seen.setdefault("prompt_ids", [list(p) for p in prompt_ids])
        calls = seen["calls"] = seen.get("calls", 0) + 1
        script = replies if turns is None else turns[calls - 1]
        if script is None:
            return real_generate(self, prompt_ids, *args, **kwargs)
        tokenizer = self.processing_class
        ids = [tokenizer.encode(r + "<|im_end|>", add_special_tokens=False) for r in script]
        return [list(ids[i % len(ids)]) for i in range(len(prompt_ids))], None

    cfg = TrainConfig(model=str(tiny_model_dir("qwen3_5")), dataset=(str(data),), output_dir=str(out),
                      tuner="lora", max_steps=1, batch_size=1, logging_steps=1, save_steps=10_000, seed=0,
                      plot=False, max_length=max_length, enable_thinking=enable_thinking)  # fmt: skip
    sampling = {"num_generations": 2, "max_completion_length": 8, **grpo_options}
    grpo = GRPOOptions(reward=("reward_model",), reward_option=tuple(f"reward_model.{k}={v}" for k, v in
                       options.items()), **sampling)  # fmt: skip
    mp = pytest.MonkeyPatch()
    mp.setattr(cls, "_generate_and_score_completions", score)
    mp.setattr(cls, "_generate_single_turn", generate)
    mp.setattr(cls, "_calculate_rewards", rewards)
    try:
        run(cfg, plugins, grpo)
    finally:
        mp.undo()
    logs = [json.loads(line) for line in (out / "logs.jsonl").read_text().splitlines()]
    return logs, {**(seen.get("out") or {}), "prompt_ids": seen.get("prompt_ids"), "rewards": seen.get("rewards")}


def _rollout_texts(batch: dict[str, Any], tiny_model_dir: Any, plugins: Any) -> list[str]:
    """The step's two completions as the recipe decoded them for its rewards."""
    from swiftcore_recipe_rl.rollout import PromptCodec

    from swiftcore.api.models import load_tokenizer
    from swiftcore.api.template import get_template

    codec = PromptCodec(get_template("qwen3_5", plugins), load_tokenizer(str(tiny_model_dir("qwen3_5"))))
    return [codec.decode(batch["completion_ids"][row][batch["completion_mask"][row].bool()].tolist()) for row in (0, 1)]


def _rm_score(checkpoint: Path, ids: list[int]) -> float:
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(str(checkpoint), dtype=torch.float32).eval()
    with torch.no_grad():
        return float(model(input_ids=torch.tensor([ids])).logits[0, 0])


def test_the_reward_is_the_rm_checkpoints_score_of_the_training_format_pair(rm_checkpoint: Path, plugins: Any) -> None:
    from swiftcore_recipe_rl.reward_model import reward_model

    replies = ["a", "b", "The vowel e."]
    record = {"messages": QUESTION, "chat_template_kwargs": {"enable_thinking": False}}
    scores = reward_model(replies, records=[record] * 3, options={"path": str(rm_checkpoint)})

    # The rm recipe's own encoding of each conversation (as it encodes its training pairs), scored by the checkpoint.
    expected = [_rm_score(rm_checkpoint, ids) for ids in _rm_encoding(rm_checkpoint, plugins, replies)]
    print(f"reward_model scores {dict(zip(replies, scores, strict=True))}, the checkpoint's {expected}")
    assert all(abs(a - b) <= 1e-5 for a, b in zip(scores, expected, strict=True)), (scores, expected)
    assert scores[0] > scores[1]  # trained: the vowel over the consonant, as in its pairs
    assert len(set(scores)) == 3


def test_grpo_logs_the_reward_models_scores_and_survives_a_missing_path(
    rm_checkpoint: Path, plugins: Any, tiny_model_dir: Any, tmp_path: Path, caplog: Any
) -> None:
    from swiftcore_recipe_rl.reward_model import reward_model

    data = tmp_path / "prompts.jsonl"
    data.write_text(json.dumps({"prompt": QUESTION}) + "\n")
    logs, batch = _grpo_step(tiny_model_dir, plugins, data, tmp_path / "ok", {"path": str(rm_checkpoint)}, False)
    [mean] = [r["rewards/reward_model/mean"] for r in logs if "rewards/reward_model/mean" in r]

    # The step's two rollouts as the recipe decoded them, scored directly: their mean is what the run logged.
    texts = _rollout_texts(batch, tiny_model_dir, plugins)
    record = {"messages": QUESTION, "chat_template_kwargs": {"enable_thinking": False}}
    direct = reward_model(texts, records=[record] * 2, options={"path": str(rm_checkpoint)})
    assert abs(mean - sum(direct) / 2) <= 1e-4, (mean, direct, texts)

    logs, _ = _grpo_step(tiny_model_dir, plugins, data, tmp_path / "missing", {}, False)
    faults = [r for r in logs if "reward_faults/reward_model" in r]
    assert faults and faults[0]["reward_faults/reward_model"] == 2.0  # both samples got the fallback
    assert "reward_model.path" in caplog.text


#: Replies in the thinking form, as a thinking policy decodes them (its prompt opened the think block): the
#: thinking mode renders them differently from the non-thinking one the reward model was trained in.
THINKING_REPLIES = ["hmm\n</think>\n\na", "hmm\n</think>\n\nb"]


def test_the_reward_models_thinking_default_is_its_own_not_the_policys(rm_checkpoint: Path, plugins: Any) -> None:
    """The reward model was trained with ``--disable-thinking`` (its manifest records it); a record that asks for no
    mode (what a policy run gives its rewards, whatever its own ``--enable-thinking``) is scored exactly as the rm
    recipe encoded its pairs, and a record that asks for thinking is scored as a pair of that row would have been."""
    from swiftcore_recipe_rl.reward_model import reward_model

    from swiftcore.api.models import read_manifest

    assert read_manifest(rm_checkpoint).record["swiftcore_args"]["enable_thinking"] is False
    replies = THINKING_REPLIES
    scores = reward_model(replies, records=[{"messages": QUESTION}] * 2, options={"path": str(rm_checkpoint)})
    trained = _rm_encoding(rm_checkpoint, plugins, replies)
    expected = [_rm_score(rm_checkpoint, ids) for ids in trained]
    assert all(abs(a - b) <= 1e-5 for a, b in zip(scores, expected, strict=True)), (scores, expected)

    # A row's own kwargs still win, as in the rm recipe: the thinking-mode rendering, which is not the training one.
    asked = {"chat_template_kwargs": {"enable_thinking": True}}
    thinking = _rm_encoding(rm_checkpoint, plugins, replies, **asked)
    assert thinking != trained  # the two modes render differently: the checks here can tell them apart
    scores = reward_model(replies, records=[{"messages": QUESTION, **asked}] * 2, options={"path": str(rm_checkpoint)})
    expected = [_rm_score(rm_checkpoint, ids) for ids in thinking]
    assert all(abs(a - b) <= 1e-5 for a, b in zip(scores, expected, strict=True)), (scores, expected)


def test_a_thinking_policy_run_gets_the_rms_own_score_of_its_training_encoding(
    rm_checkpoint: Path, plugins: Any, tiny_model_dir: Any, tmp_path: Path
) -> None:
    """A GRPO run with ``--enable-thinking`` rewarded by the reward model trained with ``--disable-thinking``, its
    replies scripted in the thinking form: the logged reward is the mean of the checkpoint's scores of the rm
    recipe's own encoding of the step's rollouts (the policy's prompt mode does not reach the reward model)."""
    data = tmp_path / "prompts.jsonl"
    data.write_text(json.dumps({"prompt": QUESTION}) + "\n")
    logs, batch = _grpo_step(
        tiny_model_dir, plugins, data, tmp_path / "run", {"path": str(rm_checkpoint)}, True, THINKING_REPLIES
    )
    [mean] = [r["rewards/reward_model/mean"] for r in logs if "rewards/reward_model/mean" in r]
    texts = _rollout_texts(batch, tiny_model_dir, plugins)
    assert texts == THINKING_REPLIES
    expected = [_rm_score(rm_checkpoint, ids) for ids in _rm_encoding(rm_checkpoint, plugins, texts)]
    assert abs(mean - sum(expected) / 2) <= 1e-5, (mean, expected, texts)
    # The policy was prompted in thinking mode (its prompt ends with an open think block), the reward model was not.
    from swiftcore.api.models import load_tokenizer

    tokenizer = load_tokenizer(str(tiny_model_dir("qwen3_5")))
    assert tokenizer.decode(batch["prompt_ids"][0]).endswith("<|im_start|>assistant\n<think>\n")


#: The first reply of the tool-calling episode: a calculator call in Qwen3.5's XML syntax, scripted (a tiny random
#: model emits no tool call).
CALCULATOR_CALL = (
    "<tool_call>\n<function=calculator>\n<parameter=expression>\n6*7\n</parameter>\n</function>\n</tool_call>"
)


def test_an_episode_is_scored_on_its_whole_conversation(
    rm_checkpoint: Path, plugins: Any, tiny_model_dir: Any, tmp_path: Path
) -> None:
    """A GRPO step with ``--environment calculator``: the first episode calls the calculator, gets 42 back and
    answers "a"; the second answers "e" at once (all scripted). Each reward is the checkpoint's score of the rm
    recipe's encoding of its whole episode (the prompt with the calculator tool shown, the parsed call, the tool
    result, the final reply), and the tool-calling episode's differs from the score of its prompt + final reply."""
    from swiftcore_recipe_rl.calculator import CALCULATOR_TOOL

    from swiftcore.api.models import load_tokenizer

    data = tmp_path / "prompts.jsonl"
    data.write_text(json.dumps({"prompt": QUESTION}) + "\n")
    logs, batch = _grpo_step(
        tiny_model_dir, plugins, data, tmp_path / "run", {"path": str(rm_checkpoint)}, False,
        turns=[[CALCULATOR_CALL, "e"], ["a"]], max_length=1024, environment="calculator", max_turns=2,
        max_completion_length=96,
    )  # fmt: skip
    tokenizer = load_tokenizer(str(tiny_model_dir("qwen3_5")))
    assert "<tool_response>\n42\n</tool_response>" in tokenizer.decode(batch["completion_ids"][0])  # it ran

    call = {"type": "function", "function": {"name": "calculator", "arguments": json.dumps({"expression": "6*7"})}}
    episode = [*QUESTION, {"role": "assistant", "content": "", "tool_calls": [call]},
               {"role": "tool", "name": "calculator", "content": "42"}]  # fmt: skip
    tools = {"tools": [CALCULATOR_TOOL]}  # the calculator's prompt shows its tool; the rm pair carries it too
    [whole] = _rm_encoding(rm_checkpoint, plugins, ["a"], prompt=episode, **tools)
    alone, direct = _rm_encoding(rm_checkpoint, plugins, ["a", "e"], **tools)
    expected = [_rm_score(rm_checkpoint, whole), _rm_score(rm_checkpoint, direct)]
    without_tools = _rm_score(rm_checkpoint, alone)
    got = [r for [r] in batch["rewards"]]
    [mean] = [r["rewards/reward_model/mean"] for r in logs if "rewards/reward_model/mean" in r]
    print(f"rewards {got}, logged mean {mean}; the checkpoint's {expected}, prompt + final reply alone "
          f"{without_tools}")  # fmt: skip
    assert all(abs(a - b) <= 1e-5 for a, b in zip(got, expected, strict=True)), (got, expected)
    assert abs(mean - sum(expected) / 2) <= 1e-5, (mean, expected)
    # The tool turns count: the prompt + final reply alone (what the reward scored before episodes reached it)
    # scores otherwise.
    assert abs(expected[0] - without_tools) > 1e-3, (expected, without_tools)
