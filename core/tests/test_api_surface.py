"""The API's version means what it says: a removal from ``swiftcore.api`` is a new major, an addition a new minor.

``core/api_surface.json`` records the names of the last reviewed API (``python scripts/api_surface.py``).
"""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "core" / "api_surface.json"


def _current() -> dict:
    spec = importlib.util.spec_from_file_location("api_surface", ROOT / "scripts" / "api_surface.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.current_surface()


def _version(text: str) -> tuple[int, int]:
    major, minor = text.split(".")
    return int(major), int(minor)


def _names(surface: dict) -> set[str]:
    return {f"{module}:{name}" for module, names in surface["names"].items() for name in names}


def version_problems(recorded: dict, current: dict) -> list[str]:
    """What is wrong with going from the ``recorded`` API to the ``current`` one, under the versioning rule."""
    (old_major, old_minor), (major, minor) = _version(recorded["api_version"]), _version(current["api_version"])
    removed, added = sorted(_names(recorded) - _names(current)), sorted(_names(current) - _names(recorded))
    problems = []
    if removed and major <= old_major:
        problems.append(
            f"{removed} left the public API, but the plugin API is still {major}.x: a removal breaks plugins written "
            "for this major. Keep the names (a shim that says where they went), or bump the major in "
            "swiftcore/plugin_api.py and say so in CHANGELOG.md."
        )
    if added and (major, minor) <= (old_major, old_minor):
        problems.append(
            f"{added} joined the public API without a new plugin API minor: bump API_VERSION in "
            "swiftcore/plugin_api.py (a plugin using them declares the minor that has them)."
        )
    return problems


def test_the_api_changed_only_as_its_version_says() -> None:
    recorded, current = json.loads(RECORD.read_text(encoding="utf-8")), _current()
    assert version_problems(recorded, current) == []
    assert recorded == current, "the public API changed: review it, then run `python scripts/api_surface.py`"


def test_the_rule_refuses_a_removal_within_a_major_and_an_addition_without_a_minor() -> None:
    current = _current()
    major, minor = _version(current["api_version"])
    older = copy.deepcopy(current)
    older["names"]["swiftcore.api"].append("GoneSpec")  # the record had a name today's API lacks
    assert "GoneSpec" in " ".join(version_problems(older, current))
    older["api_version"] = f"{major - 1}.9"  # ... fine when today's API is a new major
    assert version_problems(older, current) == []
    newer = copy.deepcopy(current)
    newer["names"]["swiftcore.api"].append("NewSpec")  # a name added, the version left alone
    assert "NewSpec" in " ".join(version_problems(current, newer))
    newer["api_version"] = f"{major}.{minor + 1}"
    assert version_problems(current, newer) == []
