"""No command on a CPU advises installing Qwen3.5's CUDA kernels (issue 53), also where the forward runs in a process
the command spawned: ``swiftcore export --tp 2 --check-parity`` computes the transformers reference in a gloo rank."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import swiftcore

SWIFTCORE = Path(sys.executable).parent / "swiftcore"


@pytest.mark.slow
def test_export_parity_on_spawned_ranks_gives_no_kernel_advice(tmp_path: Path) -> None:
    import torch
    from swiftcore_tiny import make_tiny

    if torch.cuda.is_available():
        pytest.skip("CUDA is available here: the advice is kept")
    spec = swiftcore.load_plugins(env={}).registry.get("model", "qwen3_5")
    tiny = make_tiny(spec, tmp_path / "tiny")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWIFTCORE_")}
    argv = [str(SWIFTCORE), "export", "--model", str(tiny), "--to-mcore", str(tmp_path / "mcore"), "--tp", "2",
            "--check-parity"]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0 and "logit parity OK" in proc.stdout, proc.stderr[-3000:]
    assert "is falling back to its reference PyTorch implementation" not in proc.stderr, proc.stderr[-3000:]
