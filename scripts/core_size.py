"""Print the core's size: non-test Python lines in ``core/src``, per sub-package, against the slim-core budget.

    python scripts/core_size.py            # the table and the total
    python scripts/core_size.py --check    # also exit 1 when the total is over the budget

Lines are physical lines of every ``.py`` file under ``core/src`` (docstrings and comments included, as
``wc -l`` counts them): the budget is on those. A second column shows the code lines alone (no blank line,
comment or docstring), to tell how much of the size is explanation. ``core/tests`` is not counted. The
budget is the public-API issue's target: the core is the contract (specs, hooks, API, manager, CLI frame,
template engine, data pipeline, model resolution); engines, servers, trainers and conversion drivers belong
in plugin distributions.
"""

from __future__ import annotations

import argparse
import ast
import io
import sys
import tokenize
from collections import Counter
from pathlib import Path

BUDGET = 6000
SRC = Path(__file__).resolve().parents[1] / "core" / "src" / "swiftcore"


def code_lines(text: str) -> int:
    """Lines of ``text`` that hold code: not blank, not only a comment, not inside a docstring."""
    docstring_lines: set[int] = set()
    for node in ast.walk(ast.parse(text)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                docstring_lines.update(range(value.lineno, (value.end_lineno or value.lineno) + 1))
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            lines.update(range(token.start[0], token.end[0] + 1))
    return len(lines - docstring_lines)


def count_lines() -> tuple[Counter[str], Counter[str]]:
    """Physical lines and code lines per top-level part of the ``swiftcore`` package (a sub-package, or
    ``(modules)`` for loose files)."""
    sizes: Counter[str] = Counter()
    code: Counter[str] = Counter()
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        part = rel.parts[0] if len(rel.parts) > 1 else "(modules)"
        text = path.read_text(encoding="utf-8")
        sizes[part] += len(text.splitlines())
        code[part] += code_lines(text)
    return sizes, code


def main() -> int:
    """Print the table; with ``--check``, fail when over :data:`BUDGET`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help=f"exit 1 when the core is over {BUDGET} lines")
    args = parser.parse_args()
    sizes, code = count_lines()
    print(f"{'lines':>7}  {'code':>6}  part")
    for part, lines in sizes.most_common():
        print(f"{lines:>7}  {code[part]:>6}  swiftcore/{part}")
    total = sum(sizes.values())
    verdict = "within" if total <= BUDGET else f"{total - BUDGET} over"
    print(f"{total:>7}  {sum(code.values()):>6}  total (budget {BUDGET} lines: {verdict})")
    return 1 if args.check and total > BUDGET else 0


if __name__ == "__main__":
    sys.exit(main())
