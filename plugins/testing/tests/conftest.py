"""Building broken plugins on the spot: in-memory modules their lazy references resolve to, and the contract
run on a plugin set that holds them."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

import pytest
from swiftcore_testing import PluginContract


@pytest.fixture
def memory_module(monkeypatch: pytest.MonkeyPatch) -> Callable[..., types.ModuleType]:
    """``memory_module(name, **attributes)``: a module importable as ``name`` for one test, so that a spec's
    ``"name:attr"`` reference resolves to what the test built (removed from ``sys.modules`` afterwards)."""

    def make(name: str, **attributes: Any) -> types.ModuleType:
        module = types.ModuleType(name)
        module.__dict__.update(attributes)
        monkeypatch.setitem(sys.modules, name, module)
        return module

    return make


@pytest.fixture
def contract_for() -> Callable[[str], PluginContract]:
    """``contract_for(plugin)``: the contract's tests bound to ``plugin``, a plugin added in memory to the
    plugin set each test method is given (an instance, not a subclass: nothing is looked up at collection)."""

    def bind(plugin: str) -> PluginContract:
        contract = PluginContract()
        contract.plugin = plugin  # type: ignore[misc]
        return contract

    return bind
