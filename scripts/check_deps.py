"""Check that every distribution declares what its sources import (deptry, one distribution at a time).

    python scripts/check_deps.py                 # every distribution; exit 1 on any finding
    python scripts/check_deps.py plugins/train   # just these

Each distribution is checked on its own ``src/`` against its own ``pyproject.toml``: an import must resolve to
the distribution itself, the standard library or a dependency it declares (an extra counts: the code behind an
extra names what to install when it is missing). deptry's codes:

- DEP001: imported, but no installed distribution provides it (undeclared and not in the dev venv either);
- DEP002: declared, but never imported;
- DEP003: imported, but only installed because something else depends on it (the bug that made
  ``swiftcore train`` crash on ``import matplotlib`` after a finished run in a user's venv);
- DEP004: imported from a development-only dependency.

Why deptry and not a hand-written scan: it maps import names to distributions from installed metadata,
understands PEP 621 extras and reports line numbers. The repository's own distributions are installed
editable, whose metadata does not list their top-level modules, so the mapping for them is read here from
each ``src/`` folder and handed to deptry (``--package-module-name-map``).

A finding that is not a mistake (a template plugin a model plugin needs at run time but never imports, an
optional accelerator looked up by name) is ignored in that distribution's own ``[tool.deptry.per_rule_ignores]``,
with the reason in a comment beside it, so a third-party plugin checks itself the same way.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
GROUPS = ("core", "template_plugins/*", "model_plugins/*", "plugins/*", "megatron_bridges/*")


def distributions(selected: list[str] | None = None) -> list[Path]:
    """The folders holding a distribution (a ``pyproject.toml`` with a ``[project]`` table), sorted."""
    found: list[Path] = []
    for pattern in GROUPS:
        for folder in sorted(ROOT.glob(pattern)):
            if (folder / "pyproject.toml").is_file() and (folder / "src").is_dir():
                found.append(folder)
    if selected:
        wanted = {(ROOT / s).resolve() for s in selected}
        found = [f for f in found if f.resolve() in wanted]
    return found


def project_name(folder: Path) -> str:
    """The distribution name its ``pyproject.toml`` declares."""
    return tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))["project"]["name"]


def top_level_modules(folder: Path) -> list[str]:
    """The import names a distribution's ``src/`` provides."""
    src = folder / "src"
    names = [p.name for p in src.iterdir() if p.is_dir() and (p / "__init__.py").is_file()]
    names += [p.stem for p in src.glob("*.py")]
    return sorted(names)


def module_map(folders: list[Path]) -> str:
    """deptry's ``--package-module-name-map`` for the repository's own distributions."""
    return ",".join(f"{project_name(f)}={'|'.join(top_level_modules(f))}" for f in folders)


def check(folder: Path, mapping: str) -> list[dict]:
    """deptry's findings for one distribution (its own ``[tool.deptry]`` ignores applied)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "deptry.json"
        command = [
            sys.executable, "-m", "deptry", str(folder / "src"),
            "--config", str(folder / "pyproject.toml"),
            "--known-first-party", ",".join(top_level_modules(folder)),
            "--package-module-name-map", mapping,
            "--no-ansi", "--json-output", str(report),
        ]  # fmt: skip
        proc = subprocess.run(command, capture_output=True, text=True, cwd=folder)
        if not report.is_file():
            raise RuntimeError(f"deptry failed on {folder}: {proc.stderr or proc.stdout}")
        return json.loads(report.read_text(encoding="utf-8"))


def describe(folder: Path, finding: dict) -> str:
    """One finding as ``path:line: CODE message``, the path relative to the repository."""
    location = finding["location"]
    path = Path(location["file"])
    path = path if path.is_absolute() else folder / path
    where = path.resolve().relative_to(ROOT) if path.resolve().is_relative_to(ROOT) else path
    line = f":{location['line']}" if location.get("line") else ""
    return f"{where}{line}: {finding['error']['code']} {finding['error']['message']}"


def main(argv: list[str]) -> int:
    """Check the named distributions (all by default); print each finding; 1 when there are any."""
    everything = distributions()
    mapping = module_map(everything)
    folders = distributions(argv) if argv else everything
    if argv and not folders:
        print(f"no distribution at {' '.join(argv)}", file=sys.stderr)
        return 2
    total = 0
    for folder in folders:
        findings = check(folder, mapping)
        total += len(findings)
        for finding in findings:
            print(describe(folder, finding))
    print(f"{len(folders)} distributions checked, {total} undeclared or unused dependencies")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
