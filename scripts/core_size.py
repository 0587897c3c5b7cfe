"""Print the core's size: non-test Python lines in ``core/src``, per sub-package, against the slim-core budget.

    python scripts/core_size.py            # the table and the total
    python scripts/core_size.py --check    # also exit 1 when the total is over the budget

Lines are physical lines of every ``.py`` file under ``core/src`` (docstrings and comments included, as
``wc -l`` counts them); ``core/tests`` is not counted. The budget is the public-API issue's target: the core
is the contract (specs, hooks, API, manager, CLI frame, template engine, data pipeline, model resolution);
engines, servers, trainers and conversion drivers belong in plugin distributions.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

BUDGET = 6000
SRC = Path(__file__).resolve().parents[1] / "core" / "src" / "swiftcore"


def count_lines() -> Counter[str]:
    """Lines per top-level part of the ``swiftcore`` package (a sub-package, or ``(modules)`` for loose files)."""
    sizes: Counter[str] = Counter()
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        part = rel.parts[0] if len(rel.parts) > 1 else "(modules)"
        sizes[part] += len(path.read_text(encoding="utf-8").splitlines())
    return sizes


def main() -> int:
    """Print the table; with ``--check``, fail when over :data:`BUDGET`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help=f"exit 1 when the core is over {BUDGET} lines")
    args = parser.parse_args()
    sizes = count_lines()
    for part, lines in sizes.most_common():
        print(f"{lines:>7}  swiftcore/{part}")
    total = sum(sizes.values())
    print(f"{total:>7}  total (budget {BUDGET}: {'within' if total <= BUDGET else f'{total - BUDGET} over'})")
    return 1 if args.check and total > BUDGET else 0


if __name__ == "__main__":
    sys.exit(main())
