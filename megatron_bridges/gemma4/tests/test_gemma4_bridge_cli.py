"""``swiftcore export`` end to end with the Gemma 4 bridge installed (real CLI processes)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from swiftcore_testing import run_swiftcore


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return run_swiftcore("export", *args, timeout=300)


@pytest.mark.slow
def test_export_to_mcore_and_back_with_parity_checks(gemma4_tiny: Path, tmp_path: Path) -> None:
    done = _run("--model", str(gemma4_tiny), "--to-mcore", str(tmp_path / "mcore"), "--check-parity")
    assert done.returncode == 0, done.stderr
    assert "bridge: gemma4" in done.stdout
    assert "logit parity OK: max abs diff" in done.stdout and "argmax agreement 100.00%" in done.stdout
    assert (tmp_path / "mcore" / "latest_checkpointed_iteration.txt").read_text() == "release"
    done = _run("--model", str(tmp_path / "mcore"), "--to-hf", str(tmp_path / "back"), "--check-parity")
    assert done.returncode == 0, done.stderr
    assert "logit parity OK" in done.stdout
    before, after = load_file(gemma4_tiny / "model.safetensors"), load_file(tmp_path / "back" / "model.safetensors")
    assert sorted(before) == sorted(after) and all(torch.equal(after[k], v) for k, v in before.items())


def test_bad_tp_via_cli_is_a_clear_error_with_no_output(gemma4_tiny: Path, tmp_path: Path) -> None:
    done = _run("--model", str(gemma4_tiny), "--to-mcore", str(tmp_path / "mcore"), "--tp", "3")
    assert done.returncode == 2
    assert "--tp 3 does not divide config.json num_attention_heads=4" in done.stderr
    assert "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []
