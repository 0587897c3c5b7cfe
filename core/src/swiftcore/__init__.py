"""swiftcore: a slim, plugin-based core for fine-tuning, serving and converting models.

Importing this package is cheap: it never imports torch, transformers or megatron. Plugin authors
need :data:`hookimpl` and the spec dataclasses::

    from swiftcore import hookimpl, ModelSpec

    SWIFTCORE_API = "1.0"

    @hookimpl
    def swiftcore_register_models():
        return [ModelSpec(name="acme", model_types=("acme",), model_class="transformers:AutoModelForCausalLM")]
"""

from __future__ import annotations

from swiftcore.errors import (
    ConflictError,
    IncompatiblePluginError,
    PluginError,
    PluginLoadError,
    PluginNotFoundError,
    SpecError,
    SwiftcoreError,
    UnknownNameError,
)
from swiftcore.hookspecs import hookimpl
from swiftcore.plugin_api import API_VERSION, API_VERSION_STRING
from swiftcore.specs import (
    BackendSpec,
    BridgeSpec,
    CommandSpec,
    HeadSpec,
    ModelParts,
    ModelSpec,
    Provider,
    TemplateSpec,
)

__version__ = "0.1.0"

__all__ = [
    "API_VERSION",
    "API_VERSION_STRING",
    "BackendSpec",
    "BridgeSpec",
    "CommandSpec",
    "ConflictError",
    "HeadSpec",
    "IncompatiblePluginError",
    "ModelParts",
    "ModelSpec",
    "PluginError",
    "PluginLoadError",
    "PluginNotFoundError",
    "Provider",
    "SpecError",
    "SwiftcoreError",
    "TemplateSpec",
    "UnknownNameError",
    "__version__",
    "hookimpl",
    "load_plugins",
]


def load_plugins(*args, **kwargs):  # type: ignore[no-untyped-def]
    """Discover and load plugins; see :func:`swiftcore._plugins.load_plugins`."""
    from swiftcore._plugins import load_plugins as _load

    return _load(*args, **kwargs)
