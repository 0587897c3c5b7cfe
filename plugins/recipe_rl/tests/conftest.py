"""Fixtures of swiftcore-recipe-rl's tests: the tiny qwen3_5 checkpoint (built once per session by the repository's
``tiny_model_dir``), the installed plugins, and one GRPO trainer on it for the fixed-batch loss checks."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def plugins() -> Any:
    """The installed plugins (no SWIFTCORE_PLUGINS from the environment)."""
    import swiftcore.api

    return swiftcore.api.load_plugins(env={})


@pytest.fixture(scope="session")
def tiny_dir(tiny_model_dir: Callable[[str], Path]) -> Path:
    """A tiny random qwen3_5 checkpoint."""
    return tiny_model_dir("qwen3_5")


def column_reward(completions: list[str], *, r: list[float], **kwargs: Any) -> list[float]:
    """A reward that returns the row's ``r`` column: fixed rewards for the fixed-batch checks."""
    return [float(x) for x in r]


@pytest.fixture(scope="session")
def grpo_trainer(tiny_dir: Path, plugins: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A ``SwiftGRPOTrainer`` on the tiny model (LoRA), groups of 4, rewarded by the ``r`` column."""
    from datasets import Dataset
    from swiftcore_recipe_rl.options import GRPOOptions
    from swiftcore_recipe_rl.recipe import grpo_config
    from swiftcore_recipe_rl.rewards import TRLReward
    from swiftcore_recipe_rl.rollout import PromptCodec
    from swiftcore_recipe_rl.trainer import grpo_trainer_class
    from swiftcore_train.config import TrainConfig
    from swiftcore_train.rewards import Reward
    from swiftcore_train.tuners import apply_tuner

    from swiftcore.api import RewardSpec
    from swiftcore.api.models import load_model, load_tokenizer, resolve_model_spec
    from swiftcore.api.template import get_template

    spec = resolve_model_spec(str(tiny_dir), plugins)
    tokenizer = load_tokenizer(str(tiny_dir))
    tokenizer.padding_side = "left"
    codec = PromptCodec(get_template(spec.default_template, plugins), tokenizer)
    cfg = TrainConfig(
        model=str(tiny_dir), dataset=("unused",), output_dir=str(tmp_path_factory.mktemp("grpo")), batch_size=2
    )
    options = GRPOOptions(reward=("column",), num_generations=4, max_completion_length=6)
    reward = Reward(spec=RewardSpec(name="column", function="x.y:z", columns=("r",)), function=column_reward)
    model = apply_tuner(load_model(spec, str(tiny_dir), plugins), spec, cfg)
    return grpo_trainer_class()(
        model=model,
        reward_funcs=[TRLReward(reward, codec)],
        args=grpo_config(cfg, options, Path(cfg.output_dir), reward_names=["column"]),
        train_dataset=Dataset.from_list([{"prompt": "p", "r": 0.0}] * 8),
        processing_class=tokenizer,
    )
