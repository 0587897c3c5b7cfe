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
    assert set(contracts["Distributions import each other's faces (package roots) only"]["packages"]) == packages
    layers = contracts["Distributions are layered: no import runs upward, none circles"]["layers"]
    layered = [name.strip() for layer in layers for name in layer.split("|")]
    assert sorted(layered) == sorted(packages | {"swiftcore"}) and len(layered) == len(set(layered))


def test_the_faces_contract_breaks_on_an_import_of_another_packages_submodule() -> None:
    """The custom contract type (scripts/faces_contract.py) on a graph with one face import and one that goes around."""
    import grimp

    sys.path.insert(0, str(ROOT))
    try:
        from scripts.faces_contract import FacesContract
    finally:
        sys.path.remove(str(ROOT))
    graph = grimp.ImportGraph()
    for module in ("acme_a", "acme_a.plugin", "acme_b", "acme_b.types", "acme_b.engine"):
        graph.add_module(module)
    graph.add_import(importer="acme_a.plugin", imported="acme_b", line_number=3, line_contents="from acme_b import X")
    graph.add_import(importer="acme_b", imported="acme_b.types", line_number=1, line_contents="from .types import X")
    graph.add_import(importer="acme_b.engine", imported="acme_b.types", line_number=1, line_contents="import")
    contract = FacesContract(name="faces", session_options={}, contract_options={"packages": ["acme_a", "acme_b"]})
    assert contract.check(graph, verbose=False).kept  # a root, and a package's own submodules: fine
    graph.add_import(importer="acme_a.plugin", imported="acme_b.types", line_number=7, line_contents="from b.types")
    check = contract.check(graph, verbose=False)
    assert not check.kept and check.metadata["violations"] == [("acme_a.plugin", "acme_b.types", [7])]


def test_the_core_stays_within_its_line_budget() -> None:
    """``scripts/core_size.py --check``: the core's non-test Python (physical lines, docstrings included) is at most
    the slim-core budget; a change that goes over it must move something out (docs/architecture.md)."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "core_size.py"), "--check"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "within" in proc.stdout


def test_distributions_tests_import_other_distributions_by_their_faces_too() -> None:
    """A distribution's own tests, like its sources, use another distribution through its face only (import-linter
    sees installed packages, not test folders, so this reads them). The cross-distribution tests in ``tests/`` may
    reach inside (they patch internals to fake an engine, say), as may the core's tests."""
    import ast

    packages = {
        p.name: p.parents[1]
        for root in ("template_plugins", "model_plugins", "plugins", "megatron_bridges")
        for p in (ROOT / root).glob("*/src/*")
        if (p / "__init__.py").exists()
    }
    found = []
    for folder in {f for f in packages.values()}:
        own = {name for name, where in packages.items() if where == folder}
        for path in (folder / "tests").rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                modules = [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else []
                modules += [a.name for a in node.names] if isinstance(node, ast.Import) else []
                for module in modules:
                    top = module.partition(".")[0]
                    if top in packages and top not in own and "." in module:
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {module}")
    assert found == [], "import these from the package root (its face):\n" + "\n".join(found)
