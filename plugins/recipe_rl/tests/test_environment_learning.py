"""Learning signal of multi-turn GRPO on CPU: a toy calculator task, fixed seeds.

The task: "What is 6*7? Use the calculator." The ``environment`` reward (the ``calculator`` environment's) is 1 when
the final reply's answer is 42 AND a calculator call succeeded in the episode, else 0. A tiny random model never
emits a tool call (Qwen3.5's XML call is ~56 exact tokens), so it is warm-started by SFT on two episodes of the
family's own rendering: one that calls ``calculator(6*7)``, reads ``42`` and answers ``42``, and one that answers
``I do not know.`` without a call (the direct reply shares no tokens with the tool episode's answer, so pushing it
down does not push down the answer after the tool result). After SFT the policy calls the calculator in a minority of
its samples; GRPO (LoRA, groups of 8, at most 3 replies per episode) must raise the mean reward by :data:`MARGIN`
within :data:`STEPS` steps: the mean of the last 3 steps' rollouts against the first 3 steps'.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

STEPS = 7
SFT_STEPS = 15
MARGIN = 0.3
LR = 2e-3


def test_grpo_learns_to_call_the_calculator(tiny_dir: Path, plugins: Any, tmp_path: Path) -> None:
    from swiftcore_recipe_rl.calculator import CALCULATOR_TOOL
    from swiftcore_recipe_rl.options import GRPOOptions
    from swiftcore_recipe_rl.recipe import run
    from swiftcore_train import TrainConfig, run_training

    question = {"role": "user", "content": "What is 6*7? Use the calculator."}
    call = {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "6*7"}}}
    episodes = [
        [question, {"role": "assistant", "content": "", "tool_calls": [call]},
         {"role": "tool", "name": "calculator", "content": "42"}, {"role": "assistant", "content": "42"}],
        [question, {"role": "assistant", "content": "I do not know."}],
    ]  # fmt: skip
    sft = tmp_path / "sft.jsonl"
    sft.write_text("".join(json.dumps({"messages": m, "tools": [CALCULATOR_TOOL]}) + "\n" for m in episodes))
    common = dict(max_length=1024, enable_thinking=False, lr_scheduler="constant", save_steps=10_000, seed=0,
                  plot=False)  # fmt: skip
    start = time.perf_counter()
    warm = TrainConfig(
        model=str(tiny_dir), dataset=(str(sft),), output_dir=str(tmp_path / "sft"), tuner="full",
        learning_rate=3e-3, max_steps=SFT_STEPS, batch_size=2, logging_steps=5, **common,
    )  # fmt: skip
    run_training(warm, plugins)
    checkpoint = sorted((tmp_path / "sft").glob("checkpoint-*"))[-1]
    sft_seconds = time.perf_counter() - start

    data = tmp_path / "prompts.jsonl"
    data.write_text((json.dumps({"messages": [question], "answer": "42"}) + "\n") * 4)
    out = tmp_path / "grpo"
    cfg = TrainConfig(
        model=str(checkpoint), dataset=(str(data),), output_dir=str(out), tuner="lora", learning_rate=LR,
        max_steps=STEPS, batch_size=1, logging_steps=1, **common,
    )  # fmt: skip
    options = GRPOOptions(
        reward=("environment",), environment="calculator", max_turns=3, num_generations=8,
        max_completion_length=100, grpo_loss_type="grpo",
    )  # fmt: skip
    result = run(cfg, plugins, options)
    seconds = time.perf_counter() - start
    logs = [json.loads(line) for line in (out / "logs.jsonl").read_text().splitlines()]
    rewards = [row["rewards/environment/mean"] for row in logs if "rewards/environment/mean" in row]
    before, after = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    print(
        f"multi-turn calculator: mean reward {before:.3f} -> {after:.3f} in {STEPS} GRPO steps after {SFT_STEPS} SFT "
        f"steps; {sft_seconds:.1f} s SFT, {seconds:.1f} s in all; per step {rewards}"
    )
    assert result.global_step == STEPS and len(rewards) == STEPS
    assert after - before >= MARGIN, rewards
