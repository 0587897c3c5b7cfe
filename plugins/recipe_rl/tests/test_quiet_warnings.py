"""Warnings that mislead are dropped once the plugin is loaded (issue 53): TRL's vLLM version range."""

from __future__ import annotations

import subprocess
import sys


def test_trl_vllm_range_warning_is_dropped_once_the_plugin_is_loaded() -> None:
    # A fresh interpreter with Python's default warning filters, as `swiftcore train --recipe grpo` has (pytest's
    # own filters would hide what a user sees): TRL 1.16 warned five times a run that the pinned vLLM 0.32 is out of
    # its range.
    script = "import swiftcore_recipe_rl.plugin\nfrom trl import GRPOConfig, GRPOTrainer, RLOOTrainer\nprint('ok')\n"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
    assert "TRL currently supports vLLM" not in proc.stderr, proc.stderr[-3000:]
    # Only that message: other warnings still show.
    check = "import swiftcore_recipe_rl, warnings\nwarnings.warn('TRL says something else')\n"
    other = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=60)
    assert "TRL says something else" in other.stderr, other.stderr
