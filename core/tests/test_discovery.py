"""Discovery and loading against real installed distributions (pip-installed in the session)."""

from __future__ import annotations

import pytest

from swiftcore import IncompatiblePluginError, PluginLoadError, PluginNotFoundError
from swiftcore._plugins import discover, load_plugins


def test_discovery_reads_metadata_without_importing(plugin_path) -> None:
    import sys

    found = discover()
    acme = found["acme"]
    assert (acme.distribution, acme.version, acme.module) == (
        "swiftcore-plugin-acme",
        "0.3.1",
        "swiftcore_plugin_acme.plugin",
    )
    assert acme.capabilities == {"model": ["acme"], "template": ["acme-chat"], "command": ["acme-hello"]}
    assert found["acme_dup"].capabilities == {"model": ["acme"]}
    assert "swiftcore_plugin_acme" not in sys.modules
    assert "acme_extras.broken" not in sys.modules


@pytest.mark.parametrize(
    ("spelling", "expected"),
    [
        ("acme", {"acme"}),  # entry-point name
        ("swiftcore-plugin-acme", {"acme"}),  # distribution name
        ("swiftcore_plugin_acme", {"acme"}),  # distribution name, PEP 503 normalised
        ("acme_loose", {"acme_loose"}),  # dotted module on the path
    ],
)
def test_plugin_spellings(plugin_path, spelling: str, expected: set[str]) -> None:
    plugins = load_plugins([spelling], env={})
    assert plugins.explicit == expected
    assert {i.name for i in plugins.loaded()} == expected | {"swiftcore"}


def test_plugin_by_py_path(plugin_path) -> None:
    from pathlib import Path

    path = Path(__file__).parent / "fixtures" / "loose" / "acme_loose.py"
    plugins = load_plugins([str(path)], env={})
    spec = plugins.registry.get("template", "loose-chat")
    assert spec.provider.plugin == "acme_loose"
    assert plugins.resolved_specs == [str(path)]


def test_explicit_mode_loads_only_what_was_asked(plugin_path) -> None:
    plugins = load_plugins(["acme"], env={})
    assert plugins.registry.get("model", "acme").provider.distribution == "swiftcore-plugin-acme"
    # acme_dup also provides 'acme' but was not asked for: no conflict.
    assert plugins.infos["acme_dup"].status == "available"


def test_env_list_and_empty_env(plugin_path) -> None:
    assert load_plugins(env={"SWIFTCORE_PLUGINS": "acme,acme_loose"}).explicit == {"acme", "acme_loose"}
    none = load_plugins(env={"SWIFTCORE_PLUGINS": ""})
    assert [i.name for i in none.loaded()] == ["swiftcore"]


def test_autoload_skips_broken_and_incompatible_with_a_warning(plugin_path, capsys) -> None:
    plugins = load_plugins(env={})
    err = capsys.readouterr().err
    assert plugins.infos["acme_broken"].status == "failed"
    assert "acme_broken exploded on import" in err and "acme-extras 1.2.0" in err
    assert plugins.infos["acme_future"].status == "incompatible"
    assert "targets plugin API 9.0" in err
    assert plugins.infos["acme"].status == "loaded"


def test_strict_env_makes_autoload_failures_errors(plugin_path) -> None:
    with pytest.raises(PluginLoadError):
        load_plugins(env={"SWIFTCORE_PLUGINS_STRICT": "1"})


def test_no_blocks_a_plugin(plugin_path, capsys) -> None:
    plugins = load_plugins(["no:acme_broken", "no:acme_future"], env={})
    assert "acme_broken" not in capsys.readouterr().err
    assert plugins.infos["acme_broken"].status == "blocked"
    assert plugins.infos["acme"].status == "loaded"
    assert "no:acme_broken" in plugins.resolved_specs


def test_explicit_broken_plugin_fails_with_name_distribution_version_and_cause(plugin_path) -> None:
    with pytest.raises(PluginLoadError) as info:
        load_plugins(["acme_broken"], env={})
    message = str(info.value)
    assert "'acme_broken'" in message and "acme-extras 1.2.0" in message
    assert "RuntimeError: acme_broken exploded on import" in message
    assert isinstance(info.value.__cause__, RuntimeError)


def test_explicit_incompatible_plugin_is_refused(plugin_path) -> None:
    with pytest.raises(
        IncompatiblePluginError, match=r"acme-extras 1\.2\.0.*targets plugin API 9\.0.*Upgrade swiftcore"
    ):
        load_plugins(["acme_future"], env={})


def test_unknown_plugin_suggests_close_matches_never_an_install_of_the_typo(plugin_path) -> None:
    with pytest.raises(PluginNotFoundError) as info:
        load_plugins(["acmee"], env={})
    assert "Did you mean: acme" in str(info.value)
    assert "swiftcore-plugin-acmee" not in str(info.value)  # a typo is no package name to install


def test_missing_py_path_is_named(plugin_path) -> None:
    with pytest.raises(PluginNotFoundError, match="no such file"):
        load_plugins(["./nowhere/plugin.py"], env={})


def test_duplicate_model_conflicts_on_use_and_at_selects(plugin_path) -> None:
    from swiftcore import ConflictError

    plugins = load_plugins(["acme", "acme_dup"], env={})
    with pytest.raises(ConflictError) as info:
        plugins.registry.get("model", "acme")
    assert "swiftcore-plugin-acme 0.3.1" in str(info.value) and "acme-extras 1.2.0" in str(info.value)
    assert plugins.registry.get("model", "acme@acme_dup").provider.plugin == "acme_dup"


def test_loading_twice_is_harmless(plugin_path) -> None:
    plugins = load_plugins(["acme", "swiftcore-plugin-acme"], env={})
    assert len(plugins.registry.providers("model", "acme")) == 1


def test_plugin_command_named_like_a_core_command_is_refused(plugin_path, capsys) -> None:
    plugins = load_plugins(["acme_clash"], env={})
    assert plugins.registry.names("command") == []
    assert any("core command" in p for p in plugins.registry.problems)
    assert "plugins cannot replace core commands" in capsys.readouterr().err


def test_resolved_set_is_exported_for_children(plugin_path, monkeypatch) -> None:
    import os

    monkeypatch.setenv("SWIFTCORE_PLUGINS", "placeholder")  # so monkeypatch restores the variable afterwards
    monkeypatch.delenv("SWIFTCORE_PLUGINS")
    plugins = load_plugins(["acme", "no:acme_broken"], env={}, export_env=True)
    assert os.environ["SWIFTCORE_PLUGINS"] == "acme,no:acme_broken"
    assert plugins.child_env({})["SWIFTCORE_PLUGINS"] == "acme,no:acme_broken"
    # A child reading that value loads the same set.
    again = load_plugins(env={"SWIFTCORE_PLUGINS": os.environ["SWIFTCORE_PLUGINS"]})
    assert again.explicit == {"acme"}


def test_unknown_name_declared_by_an_unloaded_plugin_says_which_to_load(plugin_path) -> None:
    from swiftcore import UnknownNameError

    plugins = load_plugins(["acme_loose"], env={})
    with pytest.raises(UnknownNameError, match="Plugin 'acme' declares it but is not loaded; add --plugin acme"):
        plugins.registry.get("template", "acme-chat")
