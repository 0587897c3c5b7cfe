"""Record the public plugin API's names (``core/api_surface.json``), so a removal cannot slip into a minor release.

    python scripts/api_surface.py          # rewrite the record after a deliberate change to swiftcore.api

The record holds the plugin API version and every name each ``swiftcore.api`` module exports (``__all__``,
and the hookspecs). ``core/tests/test_api_surface.py`` compares it with the installed core: a name gone
while the major is unchanged is refused (removing from the API is a major bump), a name added needs a newer
minor, and any other difference asks for this script to be run, so each change to the API is a reviewed diff.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
from pathlib import Path

RECORD = Path(__file__).resolve().parents[1] / "core" / "api_surface.json"


def current_surface() -> dict:
    """``{"api_version": "MAJOR.MINOR", "names": {module: [names]}}`` of the installed core."""
    import swiftcore.api as api
    from swiftcore import hookspecs
    from swiftcore.plugin_api import API_VERSION_STRING

    names: dict[str, list[str]] = {"swiftcore.api": sorted(api.__all__)}
    for info in pkgutil.iter_modules(api.__path__):
        try:
            module = importlib.import_module(f"swiftcore.api.{info.name}")
        except ImportError:  # a module that moved out (plugin API 1.2): importing it says where it went
            continue
        names[module.__name__] = sorted(getattr(module, "__all__", ()))
    names["swiftcore.hookspecs (hooks)"] = sorted(n for n in vars(hookspecs) if n.startswith("swiftcore_"))
    return {"api_version": API_VERSION_STRING, "names": dict(sorted(names.items()))}


def main() -> None:
    """Write the record of the installed core's API."""
    RECORD.write_text(json.dumps(current_surface(), indent=2) + "\n", encoding="utf-8")
    print(f"wrote {RECORD}")


if __name__ == "__main__":
    main()
