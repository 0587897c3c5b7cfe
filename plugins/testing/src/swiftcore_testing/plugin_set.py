"""Which plugins a contract loads: the plugin under test plus the plugins its distribution depends on."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = ["contract_plugins", "dependency_plugins", "own_names"]


def dependency_plugins(plugin: str) -> list[str]:
    """Entry-point names of installed plugins that ``plugin``'s distribution requires (transitively).

    ``--plugin NAME`` loads these too (:func:`swiftcore.api.plugins.required_plugins`); the contract names
    them so that its checks can tell the plugin's own specs from its dependencies'.
    """
    from swiftcore.api.plugins import discover, required_plugins

    discovered = discover()
    start = discovered.get(plugin)
    return [] if start is None else [info.name for info in required_plugins(start, discovered)]


def contract_plugins(plugin: str, also_load: tuple[str, ...] = ()) -> Any:
    """Load ``plugin``, its dependencies' plugins and ``also_load`` (nothing else, whatever is installed)."""
    from swiftcore.api.plugins import load_plugins

    return load_plugins([plugin, *dependency_plugins(plugin), *also_load], env={})


def own_names(plugin: str, plugins: PluginSet | None = None) -> set[str]:
    """The plugin names ``plugin`` stands for (a distribution may hold several), without importing them.

    Args:
        plugin: the plugin under test.
        plugins: the plugin set of the contract: a plugin object added to it in memory
            (:meth:`~swiftcore.api.plugins.Plugins.add`) under the name ``plugin`` stands for itself, so
            the kit's own tests run the contract on plugins they build on the spot.
    """
    from swiftcore.api.plugins import discover, resolve_plugin_spec

    info = None if plugins is None else plugins.infos.get(plugin)
    if info is not None and info.source == "module":  # a module plugin's name is the plugin (as --plugin resolves it)
        return {plugin}
    return {info.name for info in resolve_plugin_spec(plugin, discover())}
