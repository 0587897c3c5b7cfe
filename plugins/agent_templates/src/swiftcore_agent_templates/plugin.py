"""Hook implementations of swiftcore-plugin-agent-templates: the agent templates, ``--agent-template`` (``train``,
``infer``, ``deploy``, ``eval``, ``web-ui``) and the hooks that apply it.

Plain data only: the templates are named lazily and the family templates imported when one is built.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from swiftcore.api import SwiftcoreError, TemplateSpec, hookimpl
from swiftcore_agent_templates.families import AGENTS, FAMILIES

SWIFTCORE_API = "1.5"  # swiftcore_addoption, swiftcore-train's and swiftcore-infer's hooks (swiftcore_addhooks, 1.5)

_PKG = "swiftcore_agent_templates"


def template_name(family: str, agent: str) -> str:
    """The registered name of agent template ``agent`` on family template ``family`` (``olmoe_hermes``)."""
    return f"{family}_{agent}"


@hookimpl
def swiftcore_register_templates() -> list[TemplateSpec]:
    """One template per (family without a tool format, agent format): ``olmoe_hermes``, ``qwen3_asr_react`` ..."""
    return [
        TemplateSpec(
            name=template_name(family, agent),
            factory=f"{_PKG}.families:{template_name(family, agent)}",
            special_tokens=spec.special_tokens,
            supports=(*spec.supports, "tools"),
            description=f"{family}'s template with {agent} tool calls (--agent-template {agent})",
        )
        for family, spec in FAMILIES.items()
        for agent in AGENTS
    ]


#: The commands that take ``--agent-template``: training switches the run's template, serving the engine's (``eval
#: --model`` and the Web-UI's chat build theirs with swiftcore-infer's ``build_engine``, which calls
#: ``swiftcore_infer_template``; the Web-UI passes the option on to the training runs it starts).
COMMANDS = ("train", "infer", "deploy", "eval", "web-ui")

_HELP_TAIL = {
    "train": "olmoe_hermes, which the checkpoint records for infer and deploy.",
    "eval": "olmoe_hermes (as --template olmoe_hermes) for the model served with --model; with --model only.",
    "web-ui": "olmoe_hermes for every checkpoint the Chat tab loads, and the Train tab's runs train with it.",
}


@hookimpl
def swiftcore_addoption(parser: Any) -> None:
    """``--agent-template NAME`` on ``train``, ``infer``, ``deploy``, ``eval`` and ``web-ui``: tool calls in an agent
    format for a family without a tool format."""
    import click  # the CLI's own dependency; only for the choice list

    for command in COMMANDS:
        group = parser.getgroup(
            "agent-templates", "agent templates (tool calls for families without a tool format)", command=command
        )
        group.addoption(
            "--agent-template",
            type=click.Choice(sorted(AGENTS)),
            default=None,
            help="Render tools, tool calls and tool results in this agent format inside the family's own chat "
            f"template (for templates without a tool format: {', '.join(FAMILIES)}); the template is then e.g. "
            + _HELP_TAIL.get(
                command, "olmoe_hermes (as --template olmoe_hermes), for a model trained elsewhere or a base model."
            ),
        )


# optionalhook: swiftcore-train declares it; without swiftcore-train installed the templates still serve.
@hookimpl(optionalhook=True)
def swiftcore_train_check(cfg: Any, options: Mapping[str, Any], model_dir: str, kind: str) -> None:
    """With ``--agent-template``: switch the run's template to the agent template on the family's template.

    (Without it, swiftcore-train's sft recipe refuses tool rows for a template with no tool format, naming
    ``--agent-template``.)"""
    agent = options.get("agent_template")
    if not agent:
        return
    from swiftcore.api import load_plugins
    from swiftcore.api.models import resolve_model_spec

    plugins = load_plugins()  # the run's set: the CLI exports it to SWIFTCORE_PLUGINS
    name = cfg.template or resolve_model_spec(model_dir, plugins, model_type=cfg.model_type).default_template
    if name:  # else the recipe reports the missing template itself
        cfg.template = _agent_template(plugins.registry.get("template", name), agent, plugins)


# optionalhook: swiftcore-infer declares it; the templates and the train hook load without swiftcore-infer.
@hookimpl(optionalhook=True)
def swiftcore_infer_template(
    template: str | None,
    model_dir: str,
    adapter: str | None,
    model_type: str | None,
    options: Mapping[str, Any],
    plugins: Any,
) -> str | None:
    """With ``--agent-template`` on ``infer`` / ``deploy``: the agent template on the template the engine would use
    (``--template``, else the checkpoint's recorded one, else the model spec's default)."""
    agent = options.get("agent_template")
    if not agent:
        return None
    from swiftcore.api.models import manifest_template, read_manifest, resolve_checkpoint, resolve_model_spec

    if template is None:  # the engine's choice (swiftcore_infer.engine.Engine._template_name)
        base, adapter_dir = resolve_checkpoint(model_dir, adapter)
        manifest = read_manifest(adapter_dir) or read_manifest(base)
        spec = resolve_model_spec(str(base), plugins, model_type)
        template = manifest_template(manifest, plugins) or spec.default_template
    if not template:
        return None  # the engine reports the missing template itself
    return _agent_template(plugins.registry.get("template", template), agent, plugins)


#: Agent template name -> the family template it wraps (``olmoe_hermes`` -> ``olmoe``).
_WRAPPED = {template_name(family, agent): family for family in FAMILIES for agent in AGENTS}


def _agent_template(spec: TemplateSpec, agent: str, plugins: Any) -> str:
    """The name of agent template ``agent`` on template ``spec`` (an agent template's family for one: a checkpoint
    trained with ``olmoe_react`` served with ``--agent-template hermes`` gets ``olmoe_hermes``), or an error saying
    why there is none."""
    if spec.name in _WRAPPED and str(spec.factory).startswith(f"{_PKG}."):
        spec = plugins.registry.get("template", _WRAPPED[spec.name])
    if "tools" in spec.supports:
        raise SwiftcoreError(
            f"--agent-template {agent}: template {spec.name!r} ({spec.provider}) has its own tool format; drop "
            "--agent-template (agent templates are for templates without one)"
        )
    name = template_name(spec.name, agent)
    if plugins.registry.find("template", name) is None:
        raise SwiftcoreError(
            f"--agent-template {agent}: no agent template for template {spec.name!r}; swiftcore-plugin-agent-templates "
            f"wraps {', '.join(FAMILIES)}"
        )
    return name
