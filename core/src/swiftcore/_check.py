"""Check plugins in a fresh process (run in a subprocess by ``swiftcore plugins --check``).

``python -m swiftcore._check SPEC [SPEC ...]`` checks each plugin and prints one JSON object per line
and plugin: import time, whether torch/transformers/megatron got imported by the plugin module, its
API version, the specs it provides, specs that do not validate, lazy references that do not resolve,
and whether the static capability index matches the hooks.

Each plugin is loaded alone (with the built-ins). All of them are loaded first, each while none of the heavy modules is
imported yet, so that the light-import check means what it would in a process of its own; only then are the lazy
references imported, so each heavy module (transformers, ...) is imported once for all plugins rather than once per
plugin. When a plugin does import a heavy module, the plugins after it cannot be checked for that in this process: they
are reported as ``deferred`` and the caller checks them in another fresh process.
"""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from swiftcore.api.protocols import PluginSet

HEAVY_MODULES = ("torch", "transformers", "megatron")


def heavy_modules_loaded() -> list[str]:
    """The heavy top-level modules present in ``sys.modules``."""
    return sorted(m for m in HEAVY_MODULES if m in sys.modules)


def check(spec: str, *, resolve_references: bool = True) -> dict[str, Any]:
    """Load plugin ``spec`` alone and report on it (see the module docstring).

    Args:
        spec: a ``--plugin`` value.
        resolve_references: also import every lazy reference (slow: it imports transformers); the contract
            kit checks references itself, so it skips this part.
    """
    return check_many([spec], resolve_references=resolve_references)[0]


def check_many(specs: list[str], *, resolve_references: bool = True) -> list[dict[str, Any]]:
    """Check each plugin of ``specs`` (see the module docstring); one report per spec, in order.

    A report with ``"deferred": True`` was not checked: an earlier plugin imported a heavy module, so
    check it in a fresh process. The first spec is always checked.
    """
    baseline = heavy_modules_loaded()
    reports: list[dict[str, Any]] = []
    pending: list[tuple[dict[str, Any], Any, dict[str, list[Any]]]] = []
    for spec in specs:
        if heavy_modules_loaded() != baseline:
            reports.append({"plugin": spec, "ok": False, "problems": [], "deferred": True})
            continue
        report, plugins, own_specs = _load_and_inspect(spec)
        reports.append(report)
        if plugins is not None:
            pending.append((report, plugins, own_specs))
    # Now the heavy part: import what the lazy references name (each module once, for every plugin).
    from swiftcore._lazy import unresolved_references

    for report, plugins, own_specs in pending:
        if resolve_references:
            report["problems"].extend(unresolved_references(own_specs))
        _finish(report, plugins)
    return reports


def _load_and_inspect(spec: str) -> tuple[dict[str, Any], Any, dict[str, list[Any]]]:
    """Load ``spec`` alone: the import time and heavy imports, API, specs. Nothing heavy is resolved."""
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
        return report, None, {}
    report["import_seconds"] = round(time.perf_counter() - start, 4)
    heavy = [m for m in heavy_modules_loaded() if m not in before]
    report["heavy_imports"] = heavy
    if heavy:
        report["problems"].append(f"importing the plugin imported {', '.join(heavy)}; import them lazily")
    # The plugin(s) SPEC names; plugins loaded because its distribution requires them are checked separately.
    names = sorted({i.name for i in _resolve_spec(spec, discover())})
    report["names"] = names
    report["api"] = {n: plugins.infos[n].api for n in names}
    provides: dict[str, list[str]] = {}
    own_specs: dict[str, list[Any]] = {}
    for kind in SPEC_KINDS:
        try:
            specs = [s for s in plugins.registry.all(kind) if s.provider.plugin in names]
        except SwiftcoreError as exc:
            report["problems"].append(str(exc))
            continue
        if specs:
            provides[kind] = sorted(s.name for s in specs)
        own_specs[kind] = specs
    report["provides"] = provides
    return report, plugins, own_specs


def _finish(report: dict[str, Any], plugins: PluginSet) -> None:
    """The registry's problems and the static capability index of a loaded plugin; sets ``ok``."""
    from swiftcore.specs import SPEC_KINDS

    registry = plugins.registry
    report["problems"].extend(registry.problems)
    for name in report.pop("names"):
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


if __name__ == "__main__":  # pragma: no cover - exercised through subprocesses
    for line in check_many(sys.argv[1:]):
        print(json.dumps(line), flush=True)
