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


@hookimpl
def swiftcore_register_backends() -> list:
    """``transformers``: the default inference backend, always there with ``swiftcore[train]``."""
    from swiftcore.specs import BackendSpec

    return [
        BackendSpec(
            name="transformers",
            factory="swiftcore.infer.transformers_engine:create_engine",
            probe="swiftcore.infer.transformers_engine:probe",
            capabilities=("generate", "stream", "embed", "lora", "update_weights"),
            requires=("torch>=2.4", "transformers>=5.0"),
            description="transformers generate(): left-padded batches, KV cache, several LoRA adapters",
        )
    ]


@hookimpl
def swiftcore_register_recipes() -> list:
    """``sft``: supervised fine-tuning, full or LoRA, on transformers' Trainer."""
    from swiftcore.specs import RecipeSpec

    return [
        RecipeSpec(
            name="sft",
            run="swiftcore.train.run:run_sft",
            tasks=("causal_lm", "asr"),
            description="supervised fine-tuning (full or LoRA) on transformers' Trainer; packing, resume, torchrun",
        )
    ]
