"""Check one plugin in isolation (run in a subprocess by ``swiftcore plugins --check``).

``python -m swiftcore._check SPEC`` loads only that plugin (and the built-ins) into a fresh
process and prints one JSON object: import time, whether torch/transformers/megatron got imported
by the plugin module, its API version, the specs it provides, specs that do not validate, lazy
references that do not resolve, and whether the static capability index matches the hooks.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

HEAVY_MODULES = ("torch", "transformers", "megatron")


def heavy_modules_loaded() -> list[str]:
    """The heavy top-level modules present in ``sys.modules``."""
    return sorted(m for m in HEAVY_MODULES if m in sys.modules)


def check(spec: str) -> dict[str, Any]:
    """Load plugin ``spec`` alone and report on it (see the module docstring)."""
    from swiftcore._lazy import unresolved_references
    from swiftcore._plugins import _resolve_spec, discover, load_plugins
    from swiftcore.errors import SwiftcoreError
    from swiftcore.specs import SPEC_KINDS

    report: dict[str, Any] = {"plugin": spec, "ok": False, "problems": []}
    before = heavy_modules_loaded()
    start = time.perf_counter()
    try:
        plugins = load_plugins([spec], env={})
    except SwiftcoreError as exc:
        report["problems"].append(str(exc))
        return report
    report["import_seconds"] = round(time.perf_counter() - start, 4)
    heavy = [m for m in heavy_modules_loaded() if m not in before]
    report["heavy_imports"] = heavy
    if heavy:
        report["problems"].append(f"importing the plugin imported {', '.join(heavy)}; import them lazily")
    # The plugin(s) SPEC names; plugins loaded because its distribution requires them are checked separately.
    names = sorted({i.name for i in _resolve_spec(spec, discover())})
    report["api"] = {n: plugins.infos[n].api for n in names}
    provides: dict[str, list[str]] = {}
    registry = plugins.registry
    for kind in SPEC_KINDS:
        try:
            specs = [s for s in registry.all(kind) if s.provider.plugin in names]
        except SwiftcoreError as exc:
            report["problems"].append(str(exc))
            continue
        if specs:
            provides[kind] = sorted(s.name for s in specs)
        report["problems"].extend(unresolved_references({kind: specs}))
    report["provides"] = provides
    report["problems"].extend(registry.problems)
    for name in names:
        info = plugins.infos[name]
        if info.source != "entry-point":
            continue
        declared = {k: sorted(v) for k, v in info.capabilities.items() if v}
        own = {kind: sorted(s.name for s in registry.all(kind) if s.provider.plugin == name) for kind in SPEC_KINDS}
        own = {kind: found for kind, found in own.items() if found}
        if declared != own:
            report["problems"].append(
                f"plugin {name!r}: the static capability index in its pyproject entry points "
                f"({declared}) differs from what its hooks return ({own}); update the "
                '[project.entry-points."swiftcore.<kind>s"] tables'
            )
    report["ok"] = not report["problems"]
    return report


if __name__ == "__main__":  # pragma: no cover - exercised through subprocesses
    print(json.dumps(check(sys.argv[1])))
