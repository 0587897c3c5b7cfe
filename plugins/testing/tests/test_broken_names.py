"""The contract catches a spec name two plugins provide, naming both providers, wherever the other one comes
from: a plugin loaded beside it, any installed plugin, or swiftcore's built-ins.

Before, the check looked at the built-ins only, and the first sign of a clash between two plugins was a
model plugin's contract failing on its default template, told to "declare the template plugin as a
dependency": the model plugin was blamed for what the two template plugins did.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from swiftcore_testing.rules import ContractViolation

from swiftcore.api import ModelSpec, TemplateSpec, hookimpl
from swiftcore.api.plugins import discover

_JINJA = "swiftcore.template.jinja:JinjaTemplate"


class TemplatePlugin:
    """A plugin providing the templates it is given, by name."""

    SWIFTCORE_API = "1.0"

    def __init__(self, *names: str) -> None:
        self.names = names

    @hookimpl
    def swiftcore_register_templates(self) -> list[TemplateSpec]:
        return [TemplateSpec(name=name, factory=_JINJA) for name in self.names]


class ModelPlugin:
    """A model plugin whose default template is ``kit_dup``."""

    SWIFTCORE_API = "1.0"

    @hookimpl
    def swiftcore_register_models(self) -> list[ModelSpec]:
        return [ModelSpec(name="kit_model", model_types=("kit_model",), model_class=_JINJA, default_template="kit_dup")]


def _clash(contract_for: Any, plugin: str, plugins: Any) -> str:
    with pytest.raises(ContractViolation) as caught:
        contract_for(plugin).test_no_core_clash(plugins)
    message = str(caught.value)
    assert message.startswith("contract rule 'no-core-clash' broken"), message
    return message


def test_two_plugins_registering_one_name_are_both_named(
    swiftcore_plugins: Any, register_plugin: Callable[..., Any], contract_for: Any
) -> None:
    register_plugin(TemplatePlugin("kit_dup"), "kit_dup_a")
    register_plugin(TemplatePlugin("kit_dup", "kit_unique"), "kit_dup_b")
    message = _clash(contract_for, "kit_dup_b", swiftcore_plugins)
    assert "template 'kit_dup' is provided by plugin kit_dup_b and by plugin kit_dup_a" in message, message
    assert "'kit_dup@kit_dup_b' or 'kit_dup@kit_dup_a'; rename one of them" in message, message
    assert "kit_unique" not in message  # only the clashing name is reported


def test_a_clash_with_an_installed_plugin_names_it(
    swiftcore_plugins: Any, register_plugin: Callable[..., Any], contract_for: Any
) -> None:
    """The plugin set holds only the plugin under test and the built-ins: the clash is found among the
    installed plugins, as users will have them."""
    installed = discover().get("template_qwen")
    if installed is None or "qwen3" not in installed.capabilities.get("template", ()):
        pytest.skip("needs swiftcore-template-qwen installed")
    register_plugin(TemplatePlugin("qwen3"), "kit_takes_qwen3")
    message = _clash(contract_for, "kit_takes_qwen3", swiftcore_plugins)
    provider = "plugin template_qwen (swiftcore-template-qwen"
    assert f"template 'qwen3' is provided by plugin kit_takes_qwen3 and by {provider}" in message, message


def test_a_builtin_name_names_the_plugin_taking_it(
    swiftcore_plugins: Any, register_plugin: Callable[..., Any], contract_for: Any
) -> None:
    register_plugin(TemplatePlugin("jinja"), "kit_takes_jinja")
    message = _clash(contract_for, "kit_takes_jinja", swiftcore_plugins)
    assert "template 'jinja' of plugin kit_takes_jinja has the name of swiftcore's built-in template" in message


def test_distinct_names_pass(swiftcore_plugins: Any, register_plugin: Callable[..., Any], contract_for: Any) -> None:
    register_plugin(TemplatePlugin("kit_a_only"), "kit_a")
    register_plugin(TemplatePlugin("kit_b_only"), "kit_b")
    contract_for("kit_b").test_no_core_clash(swiftcore_plugins)


def test_a_model_is_not_blamed_for_its_templates_clash(
    swiftcore_plugins: Any, register_plugin: Callable[..., Any], contract_for: Any
) -> None:
    """The model's default template is provided twice: the failure names both template plugins and says one
    of them renames it, instead of telling the model plugin to declare a dependency."""
    register_plugin(TemplatePlugin("kit_dup"), "kit_dup_a")
    register_plugin(TemplatePlugin("kit_dup"), "kit_dup_b")
    register_plugin(ModelPlugin(), "kit_models")

    def no_checkpoint(name: str) -> Any:
        raise AssertionError("the clash is reported before any checkpoint is made")

    with pytest.raises(ContractViolation) as caught:
        contract_for("kit_models").test_model_template_renders("kit_model", swiftcore_plugins, no_checkpoint, [])
    message = str(caught.value)
    assert "default template 'kit_dup' is provided by kit_dup_a and by kit_dup_b" in message, message
    assert "one of those plugins must rename it" in message and "declare the template plugin" not in message
