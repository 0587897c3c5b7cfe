"""Draw the import graph of the core's sub-packages and the plugin packages (``docs/architecture-imports.png``).

    python scripts/import_graph.py          # writes docs/architecture-imports.dot and, with graphviz, the PNG

Built with grimp (import-linter's graph library) from the installed packages, collapsed to one node per core
sub-package (``swiftcore.cli``, ``swiftcore.api``, ...; loose modules of ``swiftcore`` as ``swiftcore.*``)
and per plugin package. Type-checking-only imports are left out, as in the import-linter contracts.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import grimp
import tomllib

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "architecture-imports"
PUBLIC = ("swiftcore.api",)


def _node(module: str) -> str:
    parts = module.split(".")
    if parts[0] != "swiftcore":
        return parts[0]
    return "swiftcore." + parts[1] if len(parts) > 1 and not parts[1].startswith("_") else "swiftcore.*"


def edges(packages: list[str]) -> set[tuple[str, str]]:
    """``(importer, imported)`` between collapsed nodes."""
    graph = grimp.build_graph(*packages, exclude_type_checking_imports=True)
    found = set()
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            a, b = _node(module), _node(imported)
            if a != b:
                found.add((a, b))
    return found


def main() -> None:
    """Write the dot file and render it when ``dot`` is installed."""
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["root_packages"]
    found = edges(packages)
    nodes = sorted({n for edge in found for n in edge})
    lines = ["digraph imports {", "  rankdir=LR; node [shape=box, fontname=Helvetica, fontsize=10];"]
    lines.append('  subgraph cluster_core { label="core (swiftcore)"; style=rounded;')
    lines += [
        f'    "{n}"{" [style=filled, fillcolor=lightblue]" if n == "swiftcore.api" else ""};'
        for n in nodes
        if n.startswith("swiftcore.")
    ]
    lines.append("  }")
    lines += [f'  "{n}" [style=filled, fillcolor=lightyellow];' for n in nodes if not n.startswith("swiftcore.")]
    for a, b in sorted(found):
        internal = not a.startswith("swiftcore.") and b.startswith("swiftcore.") and b not in PUBLIC
        lines.append(f'  "{a}" -> "{b}"{" [color=red]" if internal else ""};')
    lines.append("}")
    OUT.with_suffix(".dot").write_text("\n".join(lines) + "\n")
    if shutil.which("dot"):
        subprocess.run(
            ["dot", "-Tpng", "-Gdpi=80", str(OUT.with_suffix(".dot")), "-o", str(OUT.with_suffix(".png"))], check=True
        )
    print(f"{len(nodes)} nodes, {len(found)} edges -> {OUT.with_suffix('.dot')}")


if __name__ == "__main__":
    main()
