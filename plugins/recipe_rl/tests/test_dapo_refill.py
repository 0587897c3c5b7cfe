"""DAPO's dynamic sampling with refill (``--dynamic-sampling --dapo-max-resample N``, arXiv:2503.14476 Algorithm 1):
the ``grpo`` trainer's batch holds only groups whose rewards differ, refilled to its size from extra generation
rounds, at most ``N`` of them; when ``N`` rounds do not fill it, a warning says so and the rest is masked out.

The trainer generates with the tiny model for real. Its reward makes every group of a ``const`` prompt constant (0)
and scores a ``vary`` prompt's completions by their text (distinct sampled texts, distinct rewards), so which groups
carry a signal is known from the prompt alone.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

SIZE = 4  # completions per prompt


def mixed_reward(completions: list[str], *, kind: list[str], **kwargs: Any) -> list[float]:
    """0 for a ``const`` row; for a ``vary`` row a score of the completion's text (sum of its code points)."""
    return [0.0 if k == "const" else float(sum(map(ord, c)) % 997) for c, k in zip(completions, kind, strict=True)]


def _rows(kinds: list[str]) -> list[dict]:
    return [{"prompt": f"{k} prompt number {i}", "kind": k} for i, k in enumerate(kinds)]


@pytest.fixture(scope="module")
def refill_trainer(tiny_dir: Path, plugins: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A ``grpo`` trainer (LoRA, groups of 4, completions of up to 6 tokens), ``--dynamic-sampling
    --dapo-max-resample 6``, on 8 prompts, half of them ``const``."""
    from datasets import Dataset
    from swiftcore_recipe_rl.options import GRPOOptions
    from swiftcore_recipe_rl.recipe import CONFIGS
    from swiftcore_recipe_rl.rewards import TRLReward
    from swiftcore_recipe_rl.rollout import PromptCodec
    from swiftcore_recipe_rl.trainer import configure_loss_variants, trainer_class
    from swiftcore_train import Reward, TrainConfig, apply_tuner

    from swiftcore.api import RewardSpec
    from swiftcore.api.models import load_model, load_tokenizer, resolve_model_spec
    from swiftcore.api.template import get_template

    spec = resolve_model_spec(str(tiny_dir), plugins)
    tokenizer = load_tokenizer(str(tiny_dir))
    tokenizer.padding_side = "left"
    codec = PromptCodec(get_template(spec.default_template, plugins), tokenizer)
    out = tmp_path_factory.mktemp("dapo")
    cfg = TrainConfig(model=str(tiny_dir), dataset=("unused",), output_dir=str(out), batch_size=2, seed=0)
    options = GRPOOptions(
        reward=("mixed",), num_generations=SIZE, max_completion_length=6, dynamic_sampling=True, dapo_max_resample=6
    )
    reward = Reward(spec=RewardSpec(name="mixed", function="x.y:z", columns=("kind",)), function=mixed_reward)
    model = apply_tuner(load_model(spec, str(tiny_dir), plugins), spec, cfg)
    trainer = trainer_class("grpo")(
        model=model,
        reward_funcs=[TRLReward(reward, codec)],
        args=CONFIGS["grpo"](cfg, options, out, reward_names=["mixed"]),
        train_dataset=Dataset.from_list(_rows(["const", "vary"] * 4)),
        processing_class=tokenizer,
    )
    configure_loss_variants(trainer, options)
    trainer.model.train()
    return trainer


def _batch(trainer: Any, kinds: list[str]) -> list[dict]:
    """A generation batch as TRL's sampler hands it over: each prompt's row ``SIZE`` times in a row."""
    return [row for row in _rows(kinds) for _ in range(SIZE)]


def _prompts(trainer: Any, out: dict) -> list[str]:
    tok = trainer.processing_class
    return [tok.decode(ids[mask.bool()]) for ids, mask in zip(out["prompt_ids"], out["prompt_mask"], strict=True)]


def test_batch_is_refilled_with_informative_groups(refill_trainer: Any) -> None:
    trainer = refill_trainer
    assert trainer.dapo_max_resample == 6 and trainer.dynamic_sampling
    out = trainer._generate_and_score_completions(_batch(trainer, ["const", "vary"]))
    metrics = trainer._metrics["train"]
    rounds = metrics["dynamic_sampling/resample_rounds"][-1]
    print(f"kept before refill {metrics['dynamic_sampling/kept'][-1]:.2f}, resample rounds {rounds:g}")
    assert metrics["dynamic_sampling/kept"][-1] == 0.5  # the const group was dropped...
    assert 1 <= rounds <= 6 and metrics["dynamic_sampling/refilled"][-1] == 1.0  # ...and replaced
    assert out["completion_ids"].size(0) == 2 * SIZE  # the configured size
    prompts = _prompts(trainer, out)
    groups = [prompts[g * SIZE : (g + 1) * SIZE] for g in range(2)]
    assert all(len(set(g)) == 1 and "vary prompt" in g[0] for g in groups), groups  # whole groups, all informative
    advantages = out["advantages"].view(2, SIZE)
    assert (advantages.abs().amax(dim=1) > 0).all(), advantages  # each group carries a signal
    lengths = out["completion_mask"].sum(dim=1)
    assert (lengths > 0).all()  # nothing masked: every group trains
    assert out["num_items_in_batch"].item() == lengths.sum().item()  # the dapo normaliser counts the new batch
    for key in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages"):
        assert out[key].size(0) == 2 * SIZE, key


def test_resample_cap_is_honoured_and_logged(
    refill_trainer: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from datasets import Dataset

    trainer = refill_trainer
    monkeypatch.setattr(trainer, "train_dataset", Dataset.from_list(_rows(["const"] * 6)))
    monkeypatch.setattr(trainer, "dapo_max_resample", 2)
    calls: list[int] = []
    generate = trainer._generate

    def counted(prompts: list) -> Any:
        calls.append(len(prompts))
        return generate(prompts)

    monkeypatch.setattr(trainer, "_generate", counted)
    with caplog.at_level(logging.WARNING, logger="swiftcore.rl"):
        out = trainer._generate_and_score_completions(_batch(trainer, ["const", "const"]))
    assert calls == [2 * SIZE] * 3  # the batch, then exactly 2 refill rounds of the same size
    assert trainer._metrics["train"]["dynamic_sampling/resample_rounds"][-1] == 2
    assert "--dapo-max-resample 2 reached: 0 of 2 groups carry a reward signal after 2 extra" in caplog.text
    assert out["completion_ids"].size(0) == 2 * SIZE
    assert out["completion_mask"].sum().item() == 0 and out["num_items_in_batch"].item() == 0  # masked, as filtered


def test_select_rollouts_pads_each_side() -> None:
    import torch
    from swiftcore_recipe_rl.dynamic_sampling import pick_groups, select_rollouts

    a = {"prompt_ids": torch.tensor([[0, 5], [6, 7]]), "completion_ids": torch.tensor([[1], [2]]),
         "advantages": torch.tensor([0.5, -0.5]), "num_items_in_batch": torch.tensor(2)}  # fmt: skip
    b = {"prompt_ids": torch.tensor([[8, 9, 10]]), "completion_ids": torch.tensor([[3, 4, 0]]),
         "advantages": torch.tensor([1.0]), "num_items_in_batch": torch.tensor(3)}  # fmt: skip
    out = select_rollouts([a, b], [(1, 0), (0, 1)], pad_id=0)
    assert out["prompt_ids"].tolist() == [[8, 9, 10], [0, 6, 7]]  # left-padded
    assert out["completion_ids"].tolist() == [[3, 4, 0], [2, 0, 0]]  # right-padded
    assert out["advantages"].tolist() == [1.0, -0.5] and "num_items_in_batch" not in out
    assert pick_groups([[False, True], [True, True]], 2) == [(0, 1, True), (1, 0, True)]
    assert pick_groups([[False, False], [False, True]], 2) == [(1, 1, True), (0, 0, False)]


def test_options_refuse_a_refill_without_dynamic_sampling() -> None:
    from swiftcore_recipe_rl.options import GRPOOptions

    with pytest.raises(ValueError, match="--dapo-max-resample 3: refills the groups --dynamic-sampling drops"):
        GRPOOptions(reward=("format",), dapo_max_resample=3)
    with pytest.raises(ValueError, match="--dapo-max-resample: -1 must be a whole number"):
        GRPOOptions(reward=("format",), dynamic_sampling=True, dapo_max_resample=-1)
    assert GRPOOptions(reward=("format",), dynamic_sampling=True, dapo_max_resample=3).dapo_max_resample == 3
