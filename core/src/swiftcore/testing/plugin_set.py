"""Which plugins a contract loads: the plugin under test plus the plugins its distribution depends on."""

from __future__ import annotations

import re
from importlib import metadata
from typing import Any

__all__ = ["contract_plugins", "dependency_plugins", "own_names"]


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def dependency_plugins(plugin: str) -> list[str]:
    """Entry-point names of installed plugins that ``plugin``'s distribution requires (transitively).

    A model plugin's default template usually lives in a template plugin it depends on; the contract
    loads that too, as a user's ``--plugin NAME`` plus auto-discovery would.
    """
    from packaging.requirements import Requirement

    from swiftcore._plugins import discover

    discovered = discover()
    by_dist: dict[str, list[str]] = {}
    for info in discovered.values():
        if info.distribution:
            by_dist.setdefault(_normalize(info.distribution), []).append(info.name)
    start = discovered.get(plugin)
    todo = [start.distribution] if start is not None and start.distribution else []
    seen: set[str] = set()
    found: list[str] = []
    while todo:
        dist = _normalize(todo.pop())
        if dist in seen:
            continue
        seen.add(dist)
        try:
            requires = metadata.requires(dist) or []
        except metadata.PackageNotFoundError:
            continue
        for line in requires:
            req = Requirement(line)
            if req.marker is not None and "extra" in str(req.marker):
                continue  # optional extras (e.g. [megatron]) are not part of the plugin's contract
            name = _normalize(req.name)
            found.extend(n for n in by_dist.get(name, []) if n != plugin and n not in found)
            todo.append(name)
    return found


def contract_plugins(plugin: str, also_load: tuple[str, ...] = ()) -> Any:
    """Load ``plugin``, its dependencies' plugins and ``also_load`` (nothing else, whatever is installed)."""
    from swiftcore._plugins import load_plugins

    return load_plugins([plugin, *dependency_plugins(plugin), *also_load], env={})


def own_names(plugin: str) -> set[str]:
    """The plugin names ``plugin`` stands for (a distribution may hold several), without importing them."""
    from swiftcore._plugins import _resolve_spec, discover

    return {info.name for info in _resolve_spec(plugin, discover())}
