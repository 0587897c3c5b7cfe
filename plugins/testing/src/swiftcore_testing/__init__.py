"""swiftcore's test-kit for plugin authors and for swiftcore's own tests: the ``swiftcore-testing`` distribution.

Installing it registers it as a pytest plugin (entry point ``pytest11``, as pytest's own plugins are), so its
fixtures are there in every test run of that environment; importing it is cheap (no torch, no transformers).
A plugin author installs it next to their plugin (``pip install swiftcore-testing``), as a test dependency.

Contract tests (a plugin's own test file subclasses this in one line)::

    from swiftcore_testing import PluginContract

    class TestAcme(PluginContract):
        plugin = "acme"

Fixtures:
    swiftcore_plugins: a fresh :class:`~swiftcore.api.plugins.Plugins` holding only swiftcore's
        built-ins: no installed plugin leaks into the test.
    register_plugin: ``register_plugin(obj, name="x")`` adds a plugin object to ``swiftcore_plugins``
        for one test and removes it afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from swiftcore.api.plugins import ENV_PLUGINS, PluginInfo, Plugins, load_plugins

__all__ = ["PluginContract", "isolated_plugins", "register_plugin", "registered", "swiftcore_plugins"]


def isolated_plugins() -> Plugins:
    """A plugin set with swiftcore's built-ins only (``SWIFTCORE_PLUGINS`` set to empty)."""
    return load_plugins(env={ENV_PLUGINS: ""})


@contextmanager
def registered(plugins: Plugins, plugin: object, name: str, **provider: Any) -> Iterator[PluginInfo]:
    """Register ``plugin`` in ``plugins`` as ``name`` for the ``with`` block, then remove it.

    Args:
        plugins: the plugin set to add to.
        plugin: a module, class or instance with ``@hookimpl`` functions and ``SWIFTCORE_API``.
        name: the plugin name its specs are attributed to.
        **provider: ``distribution=`` / ``version=`` / ``explicit=`` as for :meth:`Plugins.add`.
    """
    info = plugins.add(plugin, name, **provider)
    try:
        yield info
    finally:
        plugins.remove(name)


@pytest.fixture
def swiftcore_plugins() -> Plugins:
    """A fresh plugin set holding only swiftcore's built-ins."""
    return isolated_plugins()


@pytest.fixture
def register_plugin(swiftcore_plugins: Plugins) -> Iterator[Callable[..., PluginInfo]]:
    """A function ``register(plugin, name="test_plugin", **provider)`` whose plugins are removed after the test."""
    added: list[str] = []

    def register(plugin: object, name: str = "test_plugin", **provider: Any) -> PluginInfo:
        info = swiftcore_plugins.add(plugin, name, **provider)
        added.append(name)
        return info

    yield register
    for name in reversed(added):
        if name in swiftcore_plugins.infos:
            swiftcore_plugins.remove(name)


def __getattr__(name: str) -> Any:
    # PluginContract lives in its own module; imported on first use so that the fixtures above stay cheap.
    if name == "PluginContract":
        from swiftcore_testing.contract import PluginContract

        return PluginContract
    raise AttributeError(name)
