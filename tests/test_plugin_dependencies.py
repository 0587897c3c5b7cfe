"""`--plugin NAME` brings along the plugins NAME's distribution requires (e.g. a model's template plugin)."""

from __future__ import annotations

from swiftcore._plugins import load_plugins


def test_model_plugin_loads_its_template_plugin_and_nothing_else() -> None:
    plugins = load_plugins(["gemma4"], env={})
    assert plugins.explicit == {"gemma4", "template_gemma"}
    spec = plugins.registry.get("model", "gemma4")
    assert plugins.registry.get("template", spec.default_template).provider.plugin == "template_gemma"
    assert plugins.infos["qwen3_5"].status == "available"  # installed, not asked for: not loaded


def test_a_blocked_dependency_stays_blocked() -> None:
    plugins = load_plugins(["gemma4", "no:template_gemma"], env={})
    assert plugins.explicit == {"gemma4"}
    assert plugins.infos["template_gemma"].status == "blocked"
