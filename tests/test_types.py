"""The typed spine holds: mypy finds nothing in the core and the library distributions (``make lint`` runs the same).

The packages are those the Makefile's ``TYPED`` lists; settings (the heavy third-party stacks read as ``Any``) are
in the root ``pyproject.toml``. Plugins are handed a :class:`swiftcore.api.PluginSet`, recipes a ``TrainConfig``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _typed_packages() -> list[str]:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8").replace("\\\n", " ")
    match = re.search(r"^TYPED\s*:=\s*(.+)$", makefile, re.M)
    assert match, "the Makefile names no TYPED packages"
    return match.group(1).split()


def test_the_core_and_the_library_faces_type_check() -> None:
    mypy = Path(sys.executable).with_name("mypy")
    if not mypy.exists():
        pytest.skip("mypy is not installed (make install installs it)")
    packages = _typed_packages()
    assert "core/src/swiftcore" in packages and "plugins/train/src/swiftcore_train" in packages
    done = subprocess.run([str(mypy), *packages], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
