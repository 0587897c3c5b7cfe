"""Every distribution declares what its sources import: ``scripts/check_deps.py`` (deptry) finds nothing.

The dev venv holds every distribution, so an undeclared import works in every other test and fails only in a
user's venv (``tests/test_user_paths_from_wheels.py`` runs a few such venvs; this checks every import of all 40
distributions, in seconds).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_distribution_declares_what_it_imports() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "check_deps.py")], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    assert " distributions checked, 0 undeclared" in proc.stdout
