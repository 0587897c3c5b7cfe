"""The swiftcore-infer plugin: the ``transformers`` backend and the ``swiftcore infer`` command."""

from __future__ import annotations

from swiftcore.api import API_VERSION_STRING, BackendSpec, CommandSpec, hookimpl

SWIFTCORE_API = API_VERSION_STRING


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
