"""Draw the import graph between distributions and the core's sub-packages (``docs/architecture-imports.png``).

    python scripts/import_graph.py          # writes docs/architecture-imports.dot and, with graphviz, the PNG

Built with grimp (import-linter's graph library) from the installed packages, collapsed to one node per core
sub-package (``swiftcore.cli``, ``swiftcore.api``, ...; loose modules of ``swiftcore`` as ``swiftcore.*``)
and per plugin package. Type-checking-only imports are left out, as in the import-linter contracts.

The packages are drawn in the layers of the layers contract (root ``pyproject.toml``), top to bottom. An edge is
red when it would break a contract: a plugin importing a core module other than ``swiftcore.api``, a package
importing one of a higher layer (upward), or one in the same independent layer. The script prints how many such
edges it drew; with the contracts kept (``make lint``) there are none.
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
LAYERS_CONTRACT = "Distributions are layered: no import runs upward, none circles"


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


def layer_of(config: dict) -> dict[str, int]:
    """Package -> its layer's index in the layers contract (0 at the top); the core's sub-packages share its layer."""
    contract = next(c for c in config["contracts"] if c["name"] == LAYERS_CONTRACT)
    return {name.strip(): i for i, layer in enumerate(contract["layers"]) for name in layer.split("|")}


def is_wrong(a: str, b: str, layers: dict[str, int]) -> bool:
    """True for an edge that breaks a contract: into the core's internals, upward, or within an independent layer."""
    top_a, top_b = a.partition(".")[0], b.partition(".")[0]
    if top_a == top_b == "swiftcore":
        return False  # the core's own sub-packages: their acyclic contract is checked by lint-imports
    if top_a != "swiftcore" and top_b == "swiftcore":
        return b not in PUBLIC
    return layers[top_a] >= layers[top_b]


def main() -> None:
    """Write the dot file and render it when ``dot`` is installed."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    found = edges(config["root_packages"])
    layers = layer_of(config)
    nodes = sorted({n for edge in found for n in edge})
    lines = ["digraph imports {", "  rankdir=TB; newrank=true; node [shape=box, fontname=Helvetica, fontsize=10];"]
    lines.append('  subgraph cluster_core { label="core (swiftcore)"; style=rounded;')
    lines += [
        f'    "{n}"{" [style=filled, fillcolor=lightblue]" if n == "swiftcore.api" else ""};'
        for n in nodes
        if n.startswith("swiftcore.")
    ]
    lines.append("  }")
    for index in sorted(set(layers.values())):
        members = [n for n in nodes if not n.startswith("swiftcore") or "." not in n if layers.get(n) == index]
        if members:
            lines.append(
                "  { rank=same; " + " ".join(f'"{n}" [style=filled, fillcolor=lightyellow];' for n in members) + " }"
            )
    wrong = 0
    for a, b in sorted(found):
        bad = is_wrong(a, b, layers)
        wrong += bad
        lines.append(f'  "{a}" -> "{b}"{" [color=red]" if bad else ""};')
    lines.append("}")
    OUT.with_suffix(".dot").write_text("\n".join(lines) + "\n")
    if shutil.which("dot"):
        subprocess.run(
            ["dot", "-Tpng", "-Gdpi=60", str(OUT.with_suffix(".dot")), "-o", str(OUT.with_suffix(".png"))], check=True
        )
    print(f"{len(nodes)} nodes, {len(found)} edges, {wrong} against the contracts -> {OUT.with_suffix('.dot')}")


if __name__ == "__main__":
    main()
