"""The public plugin API: the only part of swiftcore a plugin imports (its tests add the test-kit).

Everything here is stable within a plugin API major version (:data:`API_VERSION_STRING`); everything else in
``swiftcore`` is the core's own and may change in any release. The import-linter contracts in the root
``pyproject.toml`` hold every plugin in this repository to that rule.

- ``swiftcore.api``: hook markers, spec dataclasses, errors, the plugin API version, lazy references.
- ``swiftcore.api.template``: building blocks of chat templates (segments, pieces, parsing).
- ``swiftcore.api.models``: model and tokenizer loading, requirements, LoRA merge, packed-sequence helpers,
  tiny-checkpoint helpers.
- ``swiftcore.api.plugins``: the plugin manager seen from outside (load, discover, check plugins), for tools.
- ``swiftcore.api.cli``: the CLI frame, for plugins contributing a command and tests running the CLI.
- ``swiftcore.api.protocols``: the interfaces the core calls, as ``typing.Protocol`` classes, and the check the
  contract kit runs against every lazy reference.

Importing any of them never imports torch, transformers or megatron. (The Megatron bridge base class and
mapping rules are the ``swiftcore-megatron`` distribution's: ``swiftcore_megatron``.)
"""

from __future__ import annotations

from swiftcore import load_plugins
from swiftcore._lazy import lazy_exports, resolve
from swiftcore.api.protocols import PluginSet
from swiftcore.errors import (
    ConflictError,
    IncompatiblePluginError,
    PluginError,
    SpecError,
    SwiftcoreError,
    UnknownNameError,
)
from swiftcore.hookspecs import hookimpl, hookspec
from swiftcore.plugin_api import API_VERSION, API_VERSION_STRING
from swiftcore.specs import (
    BackendSpec,
    BridgeSpec,
    CommandSpec,
    EnvironmentSpec,
    HeadSpec,
    ModelParts,
    ModelSpec,
    Provider,
    RecipeSpec,
    RewardSpec,
    TemplateSpec,
)

__all__ = [
    "API_VERSION",
    "API_VERSION_STRING",
    "BackendSpec",
    "BridgeSpec",
    "CommandSpec",
    "ConflictError",
    "EnvironmentSpec",
    "HeadSpec",
    "IncompatiblePluginError",
    "ModelParts",
    "ModelSpec",
    "PluginError",
    "PluginSet",
    "Provider",
    "RecipeSpec",
    "RewardSpec",
    "SpecError",
    "SwiftcoreError",
    "TemplateSpec",
    "UnknownNameError",
    "hookimpl",
    "hookspec",
    "lazy_exports",
    "load_plugins",
    "resolve",
]
