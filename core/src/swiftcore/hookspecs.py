# mypy: disable-error-code="empty-body"
# (a hook specification is a signature and a docstring; pluggy never runs its body)
"""swiftcore's hook specifications (pluggy project ``"swiftcore"``).

Plugins implement these with ``@swiftcore.hookimpl``. Collector hooks (``swiftcore_register_*``)
take no arguments and return a list of frozen spec dataclasses; the core calls each
implementation separately so every spec records its provider. They are called once per process,
before torch is imported: an implementation must not import torch, transformers or megatron.

Hooks only ever gain arguments (pluggy lets an implementation accept fewer arguments than the
spec), so a plugin written for API 1.0 keeps working on 1.x.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from swiftcore.api.protocols import PluginSet
    from swiftcore.options import OptionParser
    from swiftcore.specs import (
        BackendSpec,
        BridgeSpec,
        CommandSpec,
        EnvironmentSpec,
        HeadSpec,
        ModelSpec,
        RecipeSpec,
        RewardSpec,
        TemplateSpec,
    )

__all__ = ["PROJECT_NAME", "hookimpl", "hookspec"]

PROJECT_NAME = "swiftcore"
hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


# --------------------------------------------------------------------------- collectors


@hookspec
def swiftcore_register_models() -> list[ModelSpec]:
    """Return the model families this plugin provides.

    Must not import torch, transformers or megatron.

    .. versionadded:: 1.0
    """


@hookspec
def swiftcore_register_templates() -> list[TemplateSpec]:
    """Return the chat templates this plugin provides.

    .. versionadded:: 1.0
    """


@hookspec
def swiftcore_register_lm_heads() -> list[HeadSpec]:
    """Return the lm_heads (classification, embedding, reranker, generative reranker) this plugin provides.

    .. versionadded:: 1.0
    """


@hookspec
def swiftcore_register_bridges() -> list[BridgeSpec]:
    """Return the Hugging Face <-> Megatron-core bridges this plugin provides.

    The bridge classes are named lazily: megatron-core is imported only when one is used.

    .. versionadded:: 1.0
    """


@hookspec
def swiftcore_register_backends() -> list[BackendSpec]:
    """Return the inference backends this plugin provides.

    .. versionadded:: 1.0
    """


@hookspec
def swiftcore_register_commands() -> list[CommandSpec]:
    """Return extra ``swiftcore`` sub-commands.

    Called when the CLI needs a command it does not have. A command whose name is a core
    command's is refused (reported, never run).

    .. versionadded:: 1.0
    """


@hookspec
def swiftcore_register_recipes() -> list[RecipeSpec]:
    """Return the training recipes (``swiftcore train --recipe NAME``) this plugin provides.

    A recipe's own command-line options come from :func:`swiftcore_addoption`.

    .. versionadded:: 1.1
    """


@hookspec
def swiftcore_register_rewards() -> list[RewardSpec]:
    """Return the reward functions (``swiftcore train --recipe grpo --reward NAME``) this plugin provides.

    The functions are named lazily (``RewardSpec.function``) and imported only by a run that uses them.

    .. versionadded:: 1.2
    """


@hookspec
def swiftcore_register_environments() -> list[EnvironmentSpec]:
    """Return the multi-turn environments (``swiftcore train --recipe grpo --environment NAME``) this plugin provides.

    The factories are named lazily (``EnvironmentSpec.factory``).

    .. versionadded:: 1.4
    """


# --------------------------------------------------------------------------- command-line options, hooks of plugins


@hookspec
def swiftcore_addoption(parser: OptionParser) -> None:
    """Add command-line options to a swiftcore command, the way pytest plugins do in ``pytest_addoption``.

    Called for every implementation when a command that takes plugin options (``swiftcore train``, ``export``)
    builds its parser, after the plugins are loaded and before the arguments are parsed. A group is ``train``'s
    unless ``getgroup(..., command="export")`` says otherwise (options of another command are left out)::

        @hookimpl
        def swiftcore_addoption(parser):
            group = parser.getgroup("dpo", recipe="dpo")   # only valid with --recipe dpo
            group.addoption("--beta", type=float, default=0.1, help="DPO's KL strength.")

    An option tagged with a recipe given with another recipe is an error naming both; its value reaches
    the recipe's ``run`` as ``options[dest]`` (or the field of the recipe's config dataclass). A flag a
    core option or another plugin already has is refused, naming both owners.

    :param parser: the command's :class:`~swiftcore.options.OptionParser`.

    .. versionadded:: 1.1
    """


@hookspec(historic=True)
def swiftcore_addhooks(pluginmanager: pluggy.PluginManager) -> None:
    """Declare this plugin's own hooks for other plugins to implement, as pytest plugins do in ``pytest_addhooks``.

    Historic: every plugin gets the call as it is registered. Call ``pluginmanager.add_hookspecs(module)`` with a
    module of ``@swiftcore.api.hookspec`` functions (as ``swiftcore_train.hookspecs``) and call them through the
    plugin set (``plugins.pm.hook.NAME(...)``). A plugin registered before the declaring one may implement them.

    :param pluginmanager: the plugin set's pluggy ``PluginManager``.

    .. versionadded:: 1.5
    """


# --------------------------------------------------------------------------- model lifecycle


@hookspec(firstresult=True)
def swiftcore_resolve_model(model_dir: str, hf_config: dict[str, Any], candidates: list[ModelSpec]) -> str | None:
    """Pick the model spec for a checkpoint directory.

    Called by model resolution after ``--model-type`` and the directory's swiftcore args file gave no answer, before
    matching ``config.json``'s ``model_type``/``architectures``. Stops at the first non-None result.

    :param model_dir: the checkpoint directory.
    :param hf_config: its parsed ``config.json`` (empty when there is none).
    :param candidates: every registered ModelSpec.
    :return: a model spec name (``name`` or ``name@plugin``), or None to pass.

    .. versionadded:: 1.0
    """


@hookspec
def swiftcore_post_model_load(model: Any, spec: ModelSpec, model_dir: str) -> None:
    """Adjust a model right after it is loaded (patches, extra buffers), before tuners are applied.

    Called for every implementation, in registration order (not firstresult).

    :param model: the loaded ``torch.nn.Module``.
    :param spec: the ModelSpec it was loaded with.
    :param model_dir: the checkpoint directory.

    .. versionadded:: 1.0
    """


# --------------------------------------------------------------------------- checkpoint conversion


@hookspec(firstresult=True)
def swiftcore_export_checkpoint(
    target: str, model: str, out: str, options: dict[str, Any], plugins: PluginSet
) -> bool | None:
    """Convert a checkpoint into another format, for ``swiftcore export --to-mcore`` / ``--to-hf`` / ``--merge-lora``.

    Called by ``swiftcore export`` for ``--to-mcore`` (``target="mcore"``), ``--to-hf`` (``"hf"``) and
    ``--merge-lora`` (``"merged"``); stops at the first non-None result. The Megatron-core conversion
    (``swiftcore-megatron``) and the LoRA merge (``swiftcore-infer``) are such plugins; the core converts nothing
    itself. Write ``out`` atomically: a failed conversion leaves no directory.

    :param target: the format to write, e.g. ``"mcore"``, ``"hf"``, ``"merged"``.
    :param model: the input checkpoint directory.
    :param out: the output directory (does not exist yet, or is empty).
    :param options: what the command parsed: ``adapter`` (``--adapter``, with ``--merge-lora``), the options plugins
        add to ``export`` (``swiftcore_addoption``, ``command="export"``: swiftcore-megatron's ``tp``, ``ep``,
        ``bridge``, ``check_parity``, ``max_shard_size``), and ``echo`` (print a line of progress to the user).
    :param plugins: the loaded plugin set (to look bridges up in its registry).
    :return: True when converted, None when the target is not this plugin's.

    .. versionadded:: 1.2
    """
