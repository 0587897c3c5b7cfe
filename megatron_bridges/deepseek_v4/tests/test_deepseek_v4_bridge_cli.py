"""``swiftcore export`` end to end with the DeepSeek-V4 bridge installed (real CLI processes)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import torch
from safetensors.torch import load_file
from swiftcore_testing import run_swiftcore


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return run_swiftcore("export", *args, timeout=300)


def test_export_to_mcore_with_parity_and_back_via_cli(ds4_with_mtp: Path, tmp_path: Path) -> None:
    done = _run("--model", str(ds4_with_mtp), "--to-mcore", str(tmp_path / "mcore"), "--ep", "2", "--check-parity")
    assert done.returncode == 0, done.stderr
    assert "bridge: deepseek_v4" in done.stdout
    assert "logit parity OK: max abs diff" in done.stdout and "argmax agreement 100.00%" in done.stdout
    assert len(list((tmp_path / "mcore" / "release").glob("mp_rank_*/model_optim_rng.pt"))) == 2
    done = _run("--model", str(tmp_path / "mcore"), "--to-hf", str(tmp_path / "back"))
    assert done.returncode == 0, done.stderr
    before, after = load_file(ds4_with_mtp / "model.safetensors"), load_file(tmp_path / "back" / "model.safetensors")
    assert sorted(before) == sorted(after) and all(torch.equal(after[k], v) for k, v in before.items())


def test_tp_via_cli_is_a_clear_error_with_no_output(ds4_tiny: Path, tmp_path: Path) -> None:
    done = _run("--model", str(ds4_tiny), "--to-mcore", str(tmp_path / "mcore"), "--tp", "2")
    assert done.returncode == 2
    assert "--tp 2: the deepseek_v4 bridge converts at --tp 1 only" in done.stderr
    assert "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []
