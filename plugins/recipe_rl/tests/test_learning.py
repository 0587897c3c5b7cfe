"""Learning signal on CPU: GRPO teaches a tiny random model a verifiable format, with fixed seeds.

The task: the reply must start with a vowel (the built-in ``format`` reward, pattern ``^\\s*[aeiouAEIOU]``). A
random tiny qwen3_5 does so about one time in eight; GRPO (LoRA, groups of 8, 4-token completions, loss grpo)
must raise the mean reward by at least 0.4 within 20 steps: the mean of the last 3 steps' rollouts against the
first 3 steps' (those of the untrained policy and its first updates). Measured here: about 0.27 -> 0.98 in
about 23 s of training on 1 CPU thread.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

STEPS = 20
MARGIN = 0.4


def test_grpo_raises_the_mean_reward_on_a_toy_verifiable_task(
    tiny_dir: Path, plugins: Any, tmp_path: Path, vowel: Any
) -> None:
    from swiftcore_recipe_rl.recipe import run

    cfg, options = vowel("grpo", tiny_dir, tmp_path, steps=STEPS, lr=2e-2, grpo_loss_type="grpo")
    out = tmp_path / "out"
    start = time.perf_counter()
    result = run(cfg, plugins, options)
    seconds = time.perf_counter() - start
    logs = [json.loads(line) for line in (out / "logs.jsonl").read_text().splitlines()]
    rewards = [row["rewards/format/mean"] for row in logs if "rewards/format/mean" in row]
    before, after = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    print(
        f"grpo toy task: mean reward {before:.3f} -> {after:.3f} in {STEPS} steps, {seconds:.1f} s; per step {rewards}"
    )
    assert result.global_step == STEPS and len(rewards) == STEPS
    assert after - before >= MARGIN, rewards
    assert after >= 0.7, rewards


# RLOO and REINFORCE++(-baseline) on the same task, same margin; (steps, the method's options). No KL penalty here:
# a random tiny model's per-token KL estimate (entropy ~5 nats) is noise as large as the reward; the KL paths are
# checked on fixed batches (test_rloo_math, test_reinforce_pp_math). RLOO's unnormalised leave-one-out advantages
# learn more slowly, so it is standardised and gets 30 steps. Measured (1 CPU thread, fixed seeds, deterministic):
# rloo 0.29 -> 0.81 in 30 steps; reinforce_pp 0.29 -> 0.88 in 20 steps.
METHODS: dict[str, tuple[int, dict[str, Any]]] = {
    "rloo": (30, {"rloo_beta": 0.0, "rloo_normalize_advantages": True}),
    "reinforce_pp": (20, {"reinforce_pp_beta": 0.0, "reinforce_pp_baseline": True}),
}


@pytest.mark.parametrize("recipe", list(METHODS))
def test_rloo_and_reinforce_pp_raise_the_mean_reward_on_the_toy_task(
    recipe: str, tiny_dir: Path, plugins: Any, tmp_path: Path, vowel: Any
) -> None:
    from swiftcore_recipe_rl.recipe import run_recipe

    steps, method = METHODS[recipe]
    cfg, options = vowel(recipe, tiny_dir, tmp_path, steps=steps, lr=2e-2, **method)
    out = tmp_path / "out"
    start = time.perf_counter()
    result = run_recipe(recipe, cfg, plugins, options)
    seconds = time.perf_counter() - start
    logs = [json.loads(line) for line in (out / "logs.jsonl").read_text().splitlines()]
    rewards = [row["rewards/format/mean"] for row in logs if "rewards/format/mean" in row]
    before, after = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    print(f"{recipe} toy task: mean reward {before:.3f} -> {after:.3f} in {steps} steps, {seconds:.1f} s; {rewards}")
    assert result.global_step == steps and len(rewards) == steps
    assert after - before >= MARGIN, rewards
    assert after >= 0.7, rewards
    assert json.loads((out / "args.json").read_text())["recipe"]["name"] == recipe
