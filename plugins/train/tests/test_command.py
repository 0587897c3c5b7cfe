"""``swiftcore train`` itself (issue 53): the launcher (``--nproc-per-node``), one summary per run, and a help that
shows the chosen recipe's options."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from swiftcore_train import command
from swiftcore_train.command import train
from swiftcore_train.config import TrainResult

from swiftcore.api.cli import CliState


def _invoke(args: list[str]) -> Any:
    return CliRunner().invoke(train, args, obj=CliState(), standalone_mode=False, catch_exceptions=False)


@pytest.fixture
def fake_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Any]:
    """``run_training`` replaced by one that records its config and returns a finished run."""
    import swiftcore_train.dispatch

    runs: list[Any] = []

    def run_training(cfg: Any, plugins: Any) -> TrainResult:
        runs.append(cfg)
        return TrainResult(tmp_path, tmp_path / "checkpoint-2", tmp_path / "logs.jsonl", None, 4, 2, 0.5)

    monkeypatch.setattr(swiftcore_train.dispatch, "run_training", run_training)
    for name in ("RANK", "LOCAL_RANK", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    return runs


@pytest.mark.parametrize(("rank", "printed"), [("0", True), ("1", False)], ids=["rank-0", "rank-1"])
def test_only_rank_0_prints_the_summary(fake_run: list[Any], monkeypatch: pytest.MonkeyPatch, rank: str,
                                        printed: bool) -> None:  # fmt: skip
    monkeypatch.setenv("RANK", rank)
    result = _invoke(["--model", "m", "--dataset", "d.jsonl"])
    assert len(fake_run) == 1, "every rank trains"
    assert ("trained 2 steps" in result.output) is printed, result.output


def test_nproc_per_node_starts_the_ranks_through_torch_distributed_run(
    fake_run: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    launched: list[list[str]] = []

    def run(argv: list[str], check: bool = False) -> subprocess.CompletedProcess:
        launched.append(argv)
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(command.subprocess, "run", run)
    args = ["--model", "./tiny", "--nproc-per-node", "2", "--dataset", "d.jsonl", "--max-steps", "3"]
    result = _invoke(args)
    assert not fake_run, "the launching process does not train"
    # The ranks run the console script beside this interpreter: no `-m`, so the working directory stays off their
    # sys.path (a `tiny/` folder there is never imported).
    script = str(Path(sys.executable).parent / "swiftcore")
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    assert launched == [[*launcher, script, "train", "--model", "./tiny", "--dataset", "d.jsonl", "--max-steps", "3"]]
    assert "trained" not in result.output  # the ranks report (rank 0 does)
    # A failed rank is the command's exit status; one process needs no launcher.
    monkeypatch.setattr(command.subprocess, "run", lambda argv, check=False: subprocess.CompletedProcess(argv, 3))
    assert _invoke(["--model", "./tiny", "--dataset", "d.jsonl", "--nproc-per-node=2"]).exit_code == 3
    _invoke(["--model", "./tiny", "--dataset", "d.jsonl", "--nproc-per-node", "1"])
    assert len(fake_run) == 1


def test_nproc_per_node_under_torchrun_is_refused(fake_run: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    import click

    monkeypatch.setenv("LOCAL_RANK", "0")
    with pytest.raises(click.UsageError, match="already is a torchrun rank"):
        _invoke(["--model", "./tiny", "--dataset", "d.jsonl", "--nproc-per-node", "2"])


def _help(args: list[str]) -> str:
    return CliRunner().invoke(train, [*args, "--help"], obj=CliState(), prog_name="swiftcore train").output


def test_help_shows_the_options_of_the_chosen_recipe_only() -> None:
    grpo = _help(["--recipe", "grpo"])
    assert "--grpo-beta" in grpo and "--num-generations" in grpo and "--nproc-per-node" in grpo
    assert "--rloo-beta" not in grpo and "--beta " not in grpo and "--num-labels" not in grpo, grpo
    assert grpo.count("--rollout-engine TEXT") == 1
    sft = _help([])
    assert "--grpo-beta" not in sft and "--tp " not in sft and "--eval-every" in sft
    assert "--tp " in _help(["--engine", "megatron"])
    # Hidden is not gone: another recipe's option is still refused by name, not as an unknown option.
    result = CliRunner().invoke(train, ["--model", "m", "--dataset", "d", "--grpo-beta", "0.1"], obj=CliState())
    assert result.exit_code == 2 and "belongs to recipe 'grpo'" in result.output, result.output


def test_python_m_train_help_works_next_to_a_tiny_checkpoint(tmp_path: Path) -> None:
    # Issue 53's report: in the folder of `swiftcore make-tiny qwen3_5 ./tiny`, `python -m swiftcore.cli.main train
    # --help` (what torchrun -m runs) failed with "--plugin 'tiny' is ambiguous" although no --plugin was given.
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "config.json").write_text("{}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWIFTCORE_")}
    argv = [sys.executable, "-m", "swiftcore.cli.main", "train", "--help"]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 0 and "--nproc-per-node" in proc.stdout, proc.stderr[-2000:]
