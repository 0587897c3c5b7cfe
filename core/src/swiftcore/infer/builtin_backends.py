"""The core's built-in backend registration (registered by the core alongside :mod:`swiftcore.builtin`)."""

from __future__ import annotations

from swiftcore.hookspecs import hookimpl
from swiftcore.plugin_api import API_VERSION_STRING

SWIFTCORE_API = API_VERSION_STRING


@hookimpl
def swiftcore_register_backends() -> list:
    """``transformers``: the default backend, always installed with ``swiftcore[train]``."""
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


def ensure_registered(plugins: object) -> None:
    """Register this module with ``plugins`` unless the core already did (idempotent).

    The core registers it alongside :mod:`swiftcore.builtin`; this keeps engines and commands working on
    a plugin set built without it (an explicit ``--plugin`` list, an embedding application).
    """
    import sys

    module = sys.modules[__name__]
    pm = plugins.pm  # type: ignore[attr-defined]
    if not pm.is_registered(module):
        from swiftcore import __version__

        plugins.add(
            module,
            "swiftcore.infer",
            distribution="swiftcore",
            version=__version__,  # type: ignore[attr-defined]
            explicit=False,
        )
