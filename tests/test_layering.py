"""The layering is enforced, not reviewed: import-linter's contracts (root ``pyproject.toml``) hold.

- the core never imports a plugin;
- plugins (the test-kit ``swiftcore_testing`` among them) import only ``swiftcore.api``;
- the core's sub-packages import each other without cycles.

The "plugins import only the API" contract lists the core's modules one by one (import-linter cannot say
"all but"), so a test also checks that the list names every top-level module of the core except the public
one: a new core module cannot slip out of the contract.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import tomllib

import swiftcore

ROOT = Path(__file__).resolve().parents[1]
PUBLIC = {"swiftcore.api"}


def _contracts() -> dict[str, dict]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {c["name"]: c for c in config["contracts"]}


def test_import_linter_contracts_are_kept() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(lint), "pyproject.toml"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def test_the_api_contract_forbids_every_core_module_but_the_public_ones() -> None:
    package = Path(swiftcore.__file__).parent
    modules = {
        f"swiftcore.{p.stem if p.is_file() else p.name}"
        for p in package.iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and (p / "__init__.py").exists())
    }
    contract = _contracts()["Plugins import only the public API (swiftcore.api)"]
    assert set(contract["forbidden_modules"]) == modules - PUBLIC


def test_every_plugin_package_of_the_repository_is_held_to_the_contracts() -> None:
    packages = {
        p.name
        for root in ("template_plugins", "model_plugins", "plugins", "megatron_bridges")
        for p in (ROOT / root).glob("*/src/*")
        if (p / "__init__.py").exists()
    }
    contracts = _contracts()
    assert set(contracts["Plugins import only the public API (swiftcore.api)"]["source_modules"]) == packages
    assert set(contracts["The core never imports a plugin"]["forbidden_modules"]) == packages


def test_the_core_stays_within_its_line_budget() -> None:
    """``scripts/core_size.py --check``: the core's non-test Python (physical lines, docstrings included) is at most
    the slim-core budget; a change that goes over it must move something out (docs/architecture.md)."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "core_size.py"), "--check"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "within" in proc.stdout
