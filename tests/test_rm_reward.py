"""A reward model trained by ``--recipe rm`` as an RL reward (``--reward reward_model``, swiftcore-recipe-rl).

- The reward scores a rollout on the ids the policy produced (prompt ids + completion ids with their stop token);
  those are exactly the ids the ``rm`` recipe encodes the same conversation into, so the reward equals the
  checkpoint's own score of the training-format pair (to 1e-5);
- in a real GRPO step the logged ``rewards/reward_model/mean`` is the mean of the checkpoint's scores of the
  step's rollouts, and a missing ``path`` costs the fallback with a logged error, never the run.
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
    from swiftcore_train.config import TrainConfig

    work = tmp_path_factory.mktemp("rm")
    rows = [{"prompt": QUESTION, "chosen": v, "rejected": c} for v, c in zip("aeiou", "bcdfg", strict=True)]
    data = work / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = TrainConfig(model=str(tiny_model_dir("qwen3_5")), dataset=(str(data),), output_dir=str(work / "run"),
                      recipe="rm", tuner="full", max_steps=4, batch_size=5, learning_rate=1e-3, save_steps=10_000,
                      plot=False, enable_thinking=False)  # fmt: skip
    return Path(run_rm(cfg, plugins).last_checkpoint)


def _rm_score(checkpoint: Path, ids: list[int]) -> float:
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(str(checkpoint), dtype=torch.float32).eval()
    with torch.no_grad():
        return float(model(input_ids=torch.tensor([ids])).logits[0, 0])


def test_the_reward_is_the_rm_checkpoints_score_of_the_training_format_pair(rm_checkpoint: Path, plugins: Any) -> None:
    from swiftcore_recipe_preference.data import parse_pair
    from swiftcore_recipe_preference.encoding import encode_rm_pairs
    from swiftcore_recipe_rl.reward_model import reward_model
    from swiftcore_train.config import TrainConfig

    from swiftcore.api.models import load_tokenizer
    from swiftcore.api.template import get_template

    replies = ["a", "b", "The vowel e."]
    record = {"messages": QUESTION, "chat_template_kwargs": {"enable_thinking": False}}
    scores = reward_model(replies, records=[record] * 3, options={"path": str(rm_checkpoint)})

    # The rm recipe's own encoding of each conversation (as it encodes its training pairs), scored by the checkpoint.
    tokenizer, template = load_tokenizer(str(rm_checkpoint)), get_template("qwen3_5", plugins)
    cfg = TrainConfig(model=str(rm_checkpoint), dataset=("unused",), max_length=1024, enable_thinking=False)
    rows = [{"prompt": QUESTION, "chosen": r, "rejected": "x"} for r in replies]
    encoded = encode_rm_pairs([parse_pair(row, f"pair {i}") for i, row in enumerate(rows)], template, tokenizer, cfg)
    expected = [_rm_score(rm_checkpoint, sample["chosen_ids"]) for sample in encoded]
    print(f"reward_model scores {dict(zip(replies, scores, strict=True))}, the checkpoint's {expected}")
    assert all(abs(a - b) <= 1e-5 for a, b in zip(scores, expected, strict=True)), (scores, expected)
    assert scores[0] > scores[1]  # trained: the vowel over the consonant, as in its pairs
    assert len(set(scores)) == 3


def test_grpo_logs_the_reward_models_scores_and_survives_a_missing_path(
    rm_checkpoint: Path, plugins: Any, tiny_model_dir: Any, tmp_path: Path, caplog: Any
) -> None:
    from swiftcore_recipe_rl import trainer as trainer_module
    from swiftcore_recipe_rl.options import GRPOOptions
    from swiftcore_recipe_rl.recipe import run
    from swiftcore_train.config import TrainConfig

    data = tmp_path / "prompts.jsonl"
    data.write_text(json.dumps({"prompt": QUESTION}) + "\n")
    seen: dict[str, Any] = {}
    cls = trainer_module.grpo_trainer_class()
    real_score = cls._generate_and_score_completions

    def score(self: Any, inputs: Any) -> Any:
        out = real_score(self, inputs)
        seen.setdefault("out", out)
        return out

    def train(out: Path, options: dict[str, str]) -> list[dict]:
        cfg = TrainConfig(model=str(tiny_model_dir("qwen3_5")), dataset=(str(data),), output_dir=str(out),
                          tuner="lora", max_steps=1, batch_size=1, logging_steps=1, save_steps=10_000, seed=0,
                          plot=False, max_length=512, enable_thinking=False)  # fmt: skip
        grpo = GRPOOptions(reward=("reward_model",), reward_option=tuple(f"reward_model.{k}={v}" for k, v in
                           options.items()), num_generations=2, max_completion_length=8)  # fmt: skip
        mp = pytest.MonkeyPatch()
        mp.setattr(cls, "_generate_and_score_completions", score)
        try:
            run(cfg, plugins, grpo)
        finally:
            mp.undo()
        return [json.loads(line) for line in (out / "logs.jsonl").read_text().splitlines()]

    logs = train(tmp_path / "ok", {"path": str(rm_checkpoint)})
    [mean] = [r["rewards/reward_model/mean"] for r in logs if "rewards/reward_model/mean" in r]
    from swiftcore_recipe_rl.reward_model import reward_model
    from swiftcore_recipe_rl.rollout import PromptCodec

    from swiftcore.api.models import load_tokenizer
    from swiftcore.api.template import get_template

    # The step's two rollouts as the recipe decoded them, scored directly: their mean is what the run logged.
    codec = PromptCodec(get_template("qwen3_5", plugins), load_tokenizer(str(tiny_model_dir("qwen3_5"))))
    out = seen["out"]
    texts = [codec.decode(out["completion_ids"][row][out["completion_mask"][row].bool()].tolist()) for row in (0, 1)]
    record = {"messages": QUESTION, "chat_template_kwargs": {"enable_thinking": False}}
    direct = reward_model(texts, records=[record] * 2, options={"path": str(rm_checkpoint)})
    assert abs(mean - sum(direct) / 2) <= 1e-4, (mean, direct, texts)

    seen.clear()
    logs = train(tmp_path / "missing", {})
    faults = [r for r in logs if "reward_faults/reward_model" in r]
    assert faults and faults[0]["reward_faults/reward_model"] == 2.0  # both samples got the fallback
    assert "reward_model.path" in caplog.text
