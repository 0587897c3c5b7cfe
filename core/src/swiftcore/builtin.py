"""The core's own plugin: what swiftcore provides without any plugin installed.

Registered first under the plugin name ``swiftcore`` (as llm's default plugins are), so built-ins
go through exactly the same registry, provider tracking and conflict rules as third-party plugins.
"""

from __future__ import annotations

from swiftcore.hookspecs import hookimpl
from swiftcore.plugin_api import API_VERSION_STRING

SWIFTCORE_API = API_VERSION_STRING


@hookimpl
def swiftcore_register_templates() -> list:
    """Built-in templates: ``jinja`` renders any tokenizer's own ``chat_template``."""
    from swiftcore.specs import TemplateSpec

    return [
        TemplateSpec(
            name="jinja",
            factory="swiftcore.template.jinja:JinjaTemplate",
            description="the tokenizer's own chat_template (loss mask from generation markers or prefixes)",
        )
    ]
