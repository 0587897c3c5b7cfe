"""A GRPO run resumes from its last checkpoint: same output directory, no lost or repeated step in the log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def test_grpo_resumes_from_the_latest_checkpoint(tiny_dir: Path, plugins: Any, tmp_path: Path) -> None:
    from dataclasses import replace

    from swiftcore_recipe_rl.options import GRPOOptions
    from swiftcore_recipe_rl.recipe import run
    from swiftcore_train import TrainConfig

    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"p{i}", "answer": str(i)}) + "\n" for i in range(4)))
    out = tmp_path / "out"
    cfg = TrainConfig(
        model=str(tiny_dir), dataset=(str(data),), output_dir=str(out), max_steps=2, save_steps=1,
        logging_steps=1, seed=0, plot=False,
    )  # fmt: skip
    options = GRPOOptions(reward=("length", "accuracy"), num_generations=2, max_completion_length=3)
    first = run(cfg, plugins, options)
    assert first.global_step == 2 and (out / "checkpoint-2" / "trainer_state.json").is_file()
    resumed = run(replace(cfg, max_steps=3, resume_from_checkpoint="latest"), plugins, options)
    assert resumed.global_step == 3 and resumed.last_checkpoint == out / "checkpoint-3"
    steps = [json.loads(line)["step"] for line in (out / "logs.jsonl").read_text().splitlines()]
    logged = [s for s in steps if s]  # the closing summary record repeats the last step
    assert sorted(set(logged)) == [1, 2, 3]
    assert json.loads((out / "checkpoint-3" / "swiftcore_args.json").read_text())["recipe"]["name"] == "grpo"
