"""The public API is light: importing any ``swiftcore.api`` module imports no torch, transformers or megatron.

(The names that left the core while it was cut down, plugin API 1.2 and 1.3, had no released version, so they
keep no shim: CHANGELOG.md lists where each went.)
"""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_whole_api_imports_no_heavy_module() -> None:
    """Every ``swiftcore.api`` module is light: a plugin's option or spec module may import any of them."""
    code = (
        "import importlib, pkgutil, sys\n"
        "import swiftcore.api as api\n"
        "for m in pkgutil.iter_modules(api.__path__):\n"
        "    importlib.import_module('swiftcore.api.' + m.name)\n"
        "print(sorted(h for h in ('torch', 'transformers', 'megatron') if h in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
