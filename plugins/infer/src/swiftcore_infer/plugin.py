"""The swiftcore-infer plugin: the ``transformers`` backend, the ``swiftcore infer`` command,
``swiftcore export --merge-lora``, and the hook that lets a plugin serve a checkpoint it converts
(:mod:`swiftcore_infer.hookspecs`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from swiftcore.api import BackendSpec, CommandSpec, hookimpl

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

SWIFTCORE_API = "1.5"  # written against plugin API 1.5: the package face uses swiftcore.api.lazy_exports


@hookimpl
def swiftcore_addhooks(pluginmanager: Any) -> None:
    """Declare ``swiftcore_infer_prepare_checkpoint`` (a plugin serves a ``--model`` it converts: Megatron),
    ``swiftcore_infer_template`` (a plugin picks the template from its options: ``--agent-template``) and
    ``swiftcore_speculative_decoder`` (a plugin decodes with ``--draft DIR``: Eagle3)."""
    from swiftcore_infer import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


@hookimpl
def swiftcore_register_backends() -> list[BackendSpec]:
    """``transformers``: the default inference backend (transformers ``generate()``)."""
    return [
        BackendSpec(
            name="transformers",
            factory="swiftcore_infer.transformers_engine:create_engine",
            probe="swiftcore_infer.transformers_engine:probe",
            capabilities=("generate", "stream", "embed", "lora", "update_weights"),
            requires=("torch>=2.4", "transformers>=5.0"),
            description="transformers generate(): left-padded batches, KV cache, several LoRA adapters",
        )
    ]


@hookimpl
def swiftcore_register_commands() -> list[CommandSpec]:
    """``swiftcore infer``: run a model on a JSONL file of conversations, or chat with it."""
    return [
        CommandSpec(
            name="infer",
            target="swiftcore_infer.command:infer",
            short_help="Run a model on a JSONL file of conversations.",
        )
    ]


@hookimpl
def swiftcore_export_checkpoint(
    target: str, model: str, out: str, options: dict[str, Any], plugins: PluginSet
) -> bool | None:
    """``swiftcore export --merge-lora`` (``target="merged"``): merge the LoRA adapter ``model`` names (or
    ``options["adapter"]`` into the base ``model``) and write the full model to ``out``; None for other targets."""
    if target != "merged":
        return None
    from swiftcore_infer.merge import merge_lora

    done = merge_lora(model, out, plugins, adapter=options.get("adapter"))
    options.get("echo", print)(f"merged LoRA adapter into its base: {done}")
    return True
