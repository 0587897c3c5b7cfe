"""The plugin manager, seen from outside: load and inspect plugin sets (what the contract kit and tools use).

Plugins rarely need this module; it is for tools that check or drive plugins, as ``pluggy.PluginManager`` is
public for pytest's own tooling. The names are stable within the plugin API major version.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from swiftcore._check import check as check_plugin
from swiftcore._check import heavy_modules_loaded
from swiftcore._lazy import unresolved_references
from swiftcore._plugins import (
    BUILTIN_PLUGIN,
    ENV_PLUGINS,
    PluginInfo,
    Plugins,
    _core_version,
    _declared_api,
    _import_file,
    _resolve_spec,
    discover,
    load_plugins,
    required_plugins,
)
from swiftcore.plugin_api import check_api_version
from swiftcore.registry import CORE_COMMANDS
from swiftcore.specs import SPEC_KINDS

__all__ = [
    "BUILTIN_PLUGIN",
    "CORE_COMMANDS",
    "ENV_PLUGINS",
    "SPEC_KINDS",
    "PluginInfo",
    "Plugins",
    "check_api_version",
    "check_plugin",
    "core_version",
    "declared_api",
    "discover",
    "heavy_modules_loaded",
    "import_plugin_file",
    "load_plugins",
    "required_plugins",
    "resolve_plugin_spec",
    "unresolved_references",
]


def core_version() -> str:
    """The installed swiftcore's version, e.g. ``"0.1.0"``."""
    return _core_version()


def declared_api(module: ModuleType) -> object:
    """The ``SWIFTCORE_API`` a plugin module declares (itself or a parent package), or None."""
    return _declared_api(module)


def import_plugin_file(path) -> ModuleType:
    """Import a ``.py`` file as ``--plugin path/to/file.py`` would (cached under a ``swiftcore_local_`` name)."""
    return _import_file(Path(path))


def resolve_plugin_spec(spec: str, discovered: dict[str, PluginInfo]) -> list[PluginInfo]:
    """The plugins one ``--plugin`` value names (an entry-point, distribution, module or file; ``no:`` blocks)."""
    return _resolve_spec(spec, discovered)
