"""The core's code names no model family: every family fact comes from the family's plugins.

Markers, media tokens, bridges, the demo's default model, tokenizer classes, template names: a family owns
them and declares them in its plugin's specs or hooks; the core only reads what plugins declare. This test
scans the *code* of ``core/src/swiftcore`` -- every identifier and every string literal, f-string parts
included -- and fails naming ``file:line`` for each family name it finds.

Prose is not scanned: comments and docstrings (any bare string statement) may cite a family as an example
("Gemma 4 renders a past turn as ...") without the code depending on it. Help text that click builds from a
command's docstring is prose too; a string passed as ``help=`` or ``epilog=`` is a literal and scanned, so
examples there use placeholders (``FAMILY``, ``./tiny``).

There is no exemption: the tiny-Qwen3 inference kit that used to be the last family-naming code in the core
is the test-kit's now (``swiftcore_testing.engines``, its own distribution).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[1] / "core" / "src" / "swiftcore"

#: Model families (and family-specific class-name stems) the core's code must not name. Kept here, in the
#: test, on purpose: the core itself keeps no such list.
FAMILIES = (
    "qwen",
    "gemma",
    "deepseek",
    "llama",
    "mistral",
    "mixtral",
    "glm",
    "olmoe",
    "mimo",
    r"phi[-_]?\d",
    "internlm",
    "baichuan",
    "minicpm",
    "falcon",
    "kimi",
    "hunyuan",
    "starcoder",
)
FAMILY_RE = re.compile("|".join(FAMILIES), re.IGNORECASE)

#: What is left to move, as ``"relative/path.py:line"`` -> why. Empty: the core is clean.
_LEFT: dict[str, str] = {}


def _docstring_ids(tree: ast.AST) -> set[int]:
    """ids of the Constant nodes that are prose: any string expression statement (docstrings included)."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
    }


def _identifiers(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.arg):
        return [node.arg]
    if isinstance(node, ast.keyword) and node.arg:
        return [node.arg]
    if isinstance(node, ast.alias):
        return [part for name in (node.name, node.asname) if name for part in name.split(".")]
    if isinstance(node, (ast.ImportFrom,)) and node.module:
        return node.module.split(".")
    if isinstance(node, ast.Global | ast.Nonlocal):
        return list(node.names)
    return []


def family_names_in(path: Path) -> list[tuple[int, str]]:
    """``(line, what)`` for every family name in ``path``'s code (identifiers and non-prose strings)."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source, filename=str(path))
    prose = _docstring_ids(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) in prose:
                continue
            segment = ast.get_source_segment(source, node) or node.value
            for match in FAMILY_RE.finditer(segment):
                line = node.lineno + segment[: match.start()].count("\n")
                found.append((line, f"string {node.value!r}"[:120]))
        for name in _identifiers(node):
            if FAMILY_RE.search(name):
                found.append((getattr(node, "lineno", 0), f"identifier {name!r}"))
    return sorted(set(found))


def _scan() -> dict[str, list[str]]:
    hits: dict[str, list[str]] = {}
    for path in sorted(CORE.rglob("*.py")):
        for line, what in family_names_in(path):
            hits.setdefault(f"{path.relative_to(CORE.parent)}:{line}", []).append(what)
    return hits


def test_core_code_names_no_model_family() -> None:
    hits = {where: whats for where, whats in _scan().items() if where not in _LEFT}
    report = "\n".join(f"  {where}: {'; '.join(whats)}" for where, whats in hits.items())
    assert not hits, (
        "core code names a model family; declare the fact in the family's plugin (a spec field or hook) "
        f"and read it from the registry:\n{report}"
    )


def test_the_allowlist_of_what_is_left_is_not_stale() -> None:
    hits = _scan()
    stale = sorted(where for where in _LEFT if where not in hits)
    assert not stale, f"_LEFT names places that no longer name a family; drop them: {stale}"


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ('MODEL = "qwen3_5"\n', 1),  # a string literal
        ("def load_gemma():\n    pass\n", 1),  # an identifier
        ('x = f"{a}-deepseek"\n', 1),  # an f-string part
        ('"""Llama is prose."""\n# so is a Mistral comment\n', 0),  # docstring and comment
        ("def f():\n    '''GLM here is prose.'''\n    return 1\n", 0),
        ("from swiftcore_testing.engines import make_tiny_qwen3\n", 1),  # no name is exempt
        ("generic = 'bytelevel'\n", 0),
    ],
)
def test_the_scan_tells_code_from_prose(tmp_path: Path, code: str, expected: int) -> None:
    path = tmp_path / "mod.py"
    path.write_text(code)
    assert len(family_names_in(path)) == expected
