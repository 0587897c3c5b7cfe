"""Gradient accumulation trains the step's token-weighted loss, also for models that ask the Trainer to average.

Qwen3.5's classes set ``accepts_loss_kwargs = False``; without ``swiftcore_train.loss`` the Trainer then averages
the micro-batches' mean losses, and batch 2 x 2 accumulation steps trained another loss than batch 4 (first-step
loss 6.8217 against 6.8310 on this data, measured before the fix).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from swiftcore_testing import run_cli

COMMON = ("--tuner", "full", "--max-steps", "2", "--logging-steps", "1", "--save-steps", "100", "--learning-rate",
          "1e-3", "--lr-scheduler", "constant", "--seed", "3", "--no-plot")  # fmt: skip


def _chats(path: Path) -> Path:
    """Replies of very different lengths, so micro-batches hold different numbers of label tokens."""
    rows = [
        {"messages": [{"role": "user", "content": f"Count to {n}."},
                      {"role": "assistant", "content": " ".join(str(j) for j in range(1, n + 1))}]}
        for n in (1, 9, 2, 14, 3, 11, 1, 7)
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _steps(out: Path) -> list[dict]:
    rows = [json.loads(line) for line in (out / "logs.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in rows if "loss" in r]


@pytest.mark.parametrize("family", ["qwen3_5"])
def test_accumulated_micro_batches_train_the_whole_batch_loss(tiny_model_dir, tmp_path: Path, family: str) -> None:
    model, data = tiny_model_dir(family), _chats(tmp_path / "chats.jsonl")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the same float sums in both runs
    try:
        for name, batch in (("whole", ("--batch-size", "4")), ("accumulated", ("--batch-size", "2",
                            "--gradient-accumulation-steps", "2"))):  # fmt: skip
            run_cli("train", "--model", str(model), "--dataset", str(data), "--output-dir", str(tmp_path / name),
                    *COMMON, *batch)  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    whole, accumulated = _steps(tmp_path / "whole"), _steps(tmp_path / "accumulated")
    assert len(whole) == len(accumulated) == 2
    for a, b in zip(whole, accumulated):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5), f"step {a['step']}: {a['loss']} vs {b['loss']}"
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-4), f"step {a['step']}: grad norm"
