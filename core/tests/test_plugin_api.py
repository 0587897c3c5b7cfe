"""The plugin API version rule."""

from __future__ import annotations

import pytest

from swiftcore import API_VERSION, IncompatiblePluginError
from swiftcore.plugin_api import check_api_version


def test_same_major_older_or_equal_minor_is_compatible() -> None:
    check_api_version(f"{API_VERSION[0]}.0", "plugin 'x'", "0.1.0")
    check_api_version(f"{API_VERSION[0]}.{API_VERSION[1]}", "plugin 'x'", "0.1.0")


def test_newer_api_asks_to_upgrade_swiftcore() -> None:
    with pytest.raises(IncompatiblePluginError, match=r"targets plugin API 9\.0.*Upgrade swiftcore"):
        check_api_version("9.0", "plugin 'x'", "0.1.0")
    with pytest.raises(IncompatiblePluginError, match="Upgrade swiftcore"):
        check_api_version(f"{API_VERSION[0]}.{API_VERSION[1] + 1}", "plugin 'x'", "0.1.0")


def test_older_major_asks_to_upgrade_the_plugin() -> None:
    with pytest.raises(IncompatiblePluginError, match="Upgrade the plugin"):
        check_api_version(f"{API_VERSION[0] - 1}.9", "plugin 'x'", "0.1.0")


@pytest.mark.parametrize("value", [None, 1.0, "one", "1"])
def test_missing_or_malformed_api_is_refused(value: object) -> None:
    with pytest.raises(IncompatiblePluginError, match="SWIFTCORE_API"):
        check_api_version(value, "plugin 'x'", "0.1.0")
