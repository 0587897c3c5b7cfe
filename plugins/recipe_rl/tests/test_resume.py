"""A GRPO run resumes from its last checkpoint as if it had never stopped.

The run learns (the vowel task: rewards vary, so every step has a loss and a gradient), so a resume that lost the
adapter's weights, the optimizer's moments or the RNG state would show: the interrupted run (2 steps, then resumed to
4) must log the same losses and rewards at every step as one uninterrupted 4-step run, and end with the same weights.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

STEPS = 4


def _run(tiny_dir: Path, plugins: Any, work: Path, vowel: Any, *, steps: int, resume: bool = False) -> Any:
    from swiftcore_recipe_rl.recipe import run

    cfg, options = vowel(
        "grpo", tiny_dir, work, steps=steps, lr=5e-3, grpo_loss_type="grpo", rollout_engine="transformers"
    )
    cfg = replace(cfg, save_steps=2, resume_from_checkpoint="latest" if resume else None)
    return run(cfg, plugins, options)


def _per_step(out: Path) -> dict[int, dict[str, float]]:
    rows = [json.loads(line) for line in (out / "logs.jsonl").read_text().splitlines()]
    keys = ("loss", "grad_norm", "rewards/format/mean")
    return {row["step"]: {k: row[k] for k in keys} for row in rows if "rewards/format/mean" in row}


def _adapter(checkpoint: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(checkpoint / "adapter_model.safetensors"))


@pytest.mark.slow
def test_grpo_resumes_from_the_latest_checkpoint_as_if_never_stopped(
    tiny_dir: Path, plugins: Any, tmp_path: Path, vowel: Any
) -> None:
    import torch

    whole = _run(tiny_dir, plugins, tmp_path / "whole", vowel, steps=STEPS)
    first = _run(tiny_dir, plugins, tmp_path / "split", vowel, steps=2)
    out = tmp_path / "split" / "out"
    assert first.global_step == 2 and (out / "checkpoint-2" / "trainer_state.json").is_file()
    resumed = _run(tiny_dir, plugins, tmp_path / "split", vowel, steps=STEPS, resume=True)
    assert resumed.global_step == STEPS and resumed.last_checkpoint == out / f"checkpoint-{STEPS}"

    expected, got = _per_step(tmp_path / "whole" / "out"), _per_step(out)
    assert sorted(got) == list(range(1, STEPS + 1)), got  # every step logged once: none lost, none repeated
    rewards = [expected[s]["rewards/format/mean"] for s in sorted(expected)]
    assert any(expected[s]["loss"] != 0.0 for s in expected) and len(set(rewards)) > 1, expected  # it trains
    for step in expected:
        for key, value in expected[step].items():
            assert got[step][key] == pytest.approx(value, rel=1e-4, abs=1e-6), (step, key, got[step], expected[step])

    final, reference = _adapter(resumed.last_checkpoint), _adapter(whole.last_checkpoint)
    assert final.keys() == reference.keys()
    for name, tensor in reference.items():
        torch.testing.assert_close(final[name], tensor, rtol=1e-4, atol=1e-6, msg=name)
    assert json.loads((out / f"checkpoint-{STEPS}" / "swiftcore_args.json").read_text())["recipe"]["name"] == "grpo"
