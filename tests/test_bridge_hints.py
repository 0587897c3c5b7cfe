"""The "no bridge converts this" hint comes from what is installed, not from a table of families in core.

The core used to map model types to the distribution to ``pip install``; that table named families (a
family fact the bridges own) and turned a typed model type into a package name to install (typosquatting
bait). The hint now names the installed bridges and points at ``swiftcore plugins``.
"""

from __future__ import annotations

import pytest
from swiftcore_megatron import BridgeNotFoundError, find_bridge_spec

import swiftcore


def test_every_installed_bridge_is_found_by_each_model_type_it_claims() -> None:
    plugins = swiftcore.load_plugins()
    for spec in plugins.registry.all("bridge"):
        for model_type in spec.model_types:
            found = find_bridge_spec(model_type, plugins)
            assert model_type in found.model_types


def test_an_unclaimed_model_type_names_the_installed_bridges_and_suggests_no_package() -> None:
    plugins = swiftcore.load_plugins()
    with pytest.raises(BridgeNotFoundError) as info:
        find_bridge_spec("no_such_family_xyz", plugins)
    message = str(info.value)
    assert "model_type 'no_such_family_xyz'" in message
    assert "swiftcore plugins" in message
    assert "pip install" not in message  # never a package name guessed from what the user typed
    for spec in plugins.registry.all("bridge"):
        assert f"{spec.name} (" in message
