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

STEPS = 20
MARGIN = 0.4


def test_grpo_raises_the_mean_reward_on_a_toy_verifiable_task(tiny_dir: Path, plugins: Any, tmp_path: Path) -> None:
    from swiftcore_recipe_rl.options import GRPOOptions
    from swiftcore_recipe_rl.recipe import run
    from swiftcore_train.config import TrainConfig

    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Write a word, number {i}."}) + "\n" for i in range(16)))
    out = tmp_path / "out"
    cfg = TrainConfig(
        model=str(tiny_dir),
        dataset=(str(data),),
        output_dir=str(out),
        tuner="lora",
        learning_rate=2e-2,
        lr_scheduler="constant",
        max_steps=STEPS,
        batch_size=2,
        logging_steps=1,
        save_steps=10_000,
        seed=0,
        plot=False,
    )
    options = GRPOOptions(
        reward=("format",),
        reward_option=(r"format.pattern=^\s*[aeiouAEIOU]",),
        num_generations=8,
        max_completion_length=4,
        grpo_loss_type="grpo",
    )
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
