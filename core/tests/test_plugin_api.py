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


@pytest.mark.parametrize(
    ("declared", "advice"),
    [(f"{API_VERSION[0] - 1}.9", "Upgrade the plugin"), (f"{API_VERSION[0] + 1}.0", "Upgrade swiftcore")],
)
def test_loading_a_plugin_of_another_major_is_refused_with_what_to_do(declared: str, advice: str, tmp_path) -> None:
    """docs/writing-a-plugin.md ("Versioning"): an older major asks for a newer plugin, a newer one for a newer core."""
    from swiftcore._plugins import load_plugins

    plugin = tmp_path / f"acme_api_{declared.replace('.', '_')}.py"  # one module name per version
    plugin.write_text(f'SWIFTCORE_API = "{declared}"\n', encoding="utf-8")
    with pytest.raises(IncompatiblePluginError, match=rf"targets plugin API {declared}.*{advice}"):
        load_plugins([str(plugin)], env={})


def test_first_party_plugins_declare_a_literal_api_version() -> None:
    """Each plugin module names the API it was written against; ``= API_VERSION_STRING`` could never fail the check."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    offenders = [
        str(path.relative_to(root))
        for folder in ("plugins", "model_plugins", "template_plugins", "megatron_bridges")
        for path in (root / folder).glob("*/src/**/*.py")
        if "SWIFTCORE_API = API_VERSION" in path.read_text(encoding="utf-8")
    ]
    assert offenders == []
