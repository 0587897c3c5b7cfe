"""The ``swiftcore`` entry point: a click group whose sub-commands are imported only when run.

``swiftcore --help`` and ``swiftcore plugins`` must answer well under a second, so nothing here
imports torch, transformers, or a plugin module. Plugin commands are listed from the static
capability index (entry-point group ``swiftcore.commands``) and loaded when invoked.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click

from swiftcore import __version__
from swiftcore.errors import SwiftcoreError
from swiftcore.plugin_api import API_VERSION_STRING
from swiftcore.registry import CORE_COMMANDS

if TYPE_CHECKING:
    from swiftcore.api.protocols import PluginSet

__all__ = [
    "PLUGIN_OPTIONS",
    "CliState",
    "PluginOptionsCommand",
    "cli",
    "main",
    "option_names",
    "pass_state",
    "plugin_args",
    "plugin_option",
    "with_provider",
]

#: core command -> ("module:attr", short help). Keys must equal registry.CORE_COMMANDS.
_CORE: dict[str, tuple[str, str]] = {
    "plugins": ("swiftcore.cli.plugins_cmd:plugins", "List installed plugins and what they provide."),
    "export": ("swiftcore.cli.export_cmd:export", "Convert checkpoints (HF <-> Megatron-core, merge LoRA)."),
    "template": ("swiftcore.cli.template_cmd:template", "List, render and check chat templates."),
    "recipes": ("swiftcore.cli.recipes_cmd:recipes", "List training recipes and the options they add."),
    "rewards": ("swiftcore.cli.rewards_cmd:rewards", "List reward functions for RL recipes (--reward NAME)."),
}
assert tuple(_CORE) == CORE_COMMANDS

#: Commands of swiftcore's own plugin distributions, to say what to install when one is asked for and missing.
_PLUGIN_COMMAND_DISTRIBUTIONS = {
    "train": "swiftcore-train",
    "infer": "swiftcore-infer",
    "deploy": "swiftcore-serve",
    "eval": "swiftcore-eval",
    "make-tiny": "swiftcore-tiny",
    "demo": "swiftcore-tiny",
    "new-plugin": "swiftcore-scaffold",
    "web-ui": "swiftcore-webui",
}


@dataclass
class CliState:
    """What the group collected for its sub-commands: ``--plugin`` values and the loaded plugins."""

    plugin_specs: list[str] = field(default_factory=list)
    _plugins: Any = None

    def plugins(self, extra: tuple[str, ...] | list[str] = ()) -> Any:
        """Load (once) and return the :class:`~swiftcore._plugins.Plugins` for this invocation.

        Args:
            extra: the sub-command's own ``--plugin`` values, added to the group's.
        """
        if self._plugins is None:
            from swiftcore._plugins import load_plugins

            self.plugin_specs.extend(extra)
            self._plugins = load_plugins(self.plugin_specs, export_env=True)
        return self._plugins


pass_state = click.make_pass_decorator(CliState, ensure=True)


def plugin_option(func: Any) -> Any:
    """The ``--plugin`` option, shared by the group and the sub-commands that load plugins."""
    return click.option(
        "--plugin",
        "plugin_specs",
        multiple=True,
        metavar="SPEC",
        help=(
            "Load only this plugin (repeatable): an entry-point name, a distribution name, a dotted module or a .py "
            "file; 'no:NAME' blocks one. Default: every installed plugin, or SWIFTCORE_PLUGINS=a,b (empty = none)."
        ),
    )(func)


def plugin_args(args: list[str]) -> list[str]:
    """The ``--plugin`` values in ``args`` (``--plugin X`` and ``--plugin=X``), read before parsing (as pytest
    reads ``-p``), so that the plugin set a command parses its options with is the one it runs with."""
    found = []
    for i, arg in enumerate(args):
        if arg == "--":
            break
        if arg == "--plugin" and i + 1 < len(args):
            found.append(args[i + 1])
        elif arg.startswith("--plugin="):
            found.append(arg.partition("=")[2])
    return found


def with_provider(state: CliState, extra: list[str], kind: str, name: str) -> list[str]:
    """``extra`` (a sub-command's ``--plugin`` values) plus, when a plugin set is chosen (``--plugin``,
    ``SWIFTCORE_PLUGINS``), the installed plugin that declares the ``kind`` called ``name``: ``swiftcore deploy
    --plugin qwen3_5`` still loads the server plugin, ``swiftcore train --plugin qwen3_5`` the ``sft`` recipe's."""
    from swiftcore._plugins import discover, requested_from_env

    requested = [*state.plugin_specs, *extra]
    if not any(not s.startswith("no:") for s in requested) and requested_from_env() is None:
        return list(extra)  # every installed plugin loads anyway
    owner = next((i.name for i in discover().values() if name in i.capabilities.get(kind, ())), None)
    return [*extra, owner] if owner and owner not in requested else list(extra)


#: ``ctx.meta`` key of the options the loaded plugins added to this invocation's command.
PLUGIN_OPTIONS = "swiftcore.plugin_options"


class PluginOptionsCommand(click.Command):
    """A command taking the options loaded plugins add to it (``swiftcore_addoption``), as pytest's ``-p`` and
    ``pytest_addoption``: ``--plugin`` values are read before parsing, so the plugin set that adds the options is the
    one the run uses; the options live in ``ctx.meta`` for this invocation, never on the shared command object."""

    def plugin_set(self, state: CliState, args: list[str]) -> Any:
        """The plugins whose options ``args`` may use (``swiftcore train`` adds the provider of its recipe)."""
        return state.plugins(plugin_args(args))

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        from swiftcore.options import collect_options

        taken = {n: f"swiftcore {self.name} itself" for p in super().get_params(ctx) for n in option_names(p)}
        plugins = self.plugin_set(ctx.ensure_object(CliState), args)
        ctx.meta[PLUGIN_OPTIONS] = collect_options(plugins, self.name or "", taken)
        return super().parse_args(ctx, args)

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        params = super().get_params(ctx)
        extra = [option.click_option() for option in ctx.meta.get(PLUGIN_OPTIONS, ())]
        return params[:-1] + extra + params[-1:] if extra else params  # --help stays last


def option_names(param: click.Parameter) -> list[str]:
    """A click parameter's flags and destination, the names a plugin option may not take."""
    flags = [o.split("/")[0] for o in getattr(param, "opts", [])] + list(getattr(param, "secondary_opts", []))
    return [*flags, param.name or ""]


class LazyGroup(click.Group):
    """A group that imports a sub-command's module only when that sub-command runs."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(_CORE) + sorted(n for n in _plugin_command_index() if n not in _CORE)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in _CORE:
            from swiftcore._lazy import resolve

            return resolve(_CORE[name][0], what=f"command {name!r}")
        if name in _plugin_command_index():
            return _PluginCommand(name)
        if name in _PLUGIN_COMMAND_DISTRIBUTIONS:
            dist = _PLUGIN_COMMAND_DISTRIBUTIONS[name]
            raise click.UsageError(
                f"'swiftcore {name}' is the {dist} plugin's command, which is not installed: pip install {dist}"
            )
        return None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, help_) for name, (_, help_) in _CORE.items()]
        index = {name: owner for name, owner in sorted(_plugin_command_index().items()) if name not in _CORE}
        helps = _short_helps(ctx) if index else {}
        plugin_rows = [(name, f"{helps.get(name) or ''} [plugin {owner}]".strip()) for name, owner in index.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)
        if plugin_rows:
            with formatter.section("Plugin commands"):
                formatter.write_dl(plugin_rows)


def _short_helps(ctx: click.Context) -> dict[str, str]:
    """Each plugin command's ``CommandSpec.short_help``: the plugins' modules are light (plain data), so loading
    them for ``--help`` costs a fraction of a second; a set that cannot load leaves the rows without help."""
    state = ctx.find_object(CliState) or CliState()
    try:
        return {spec.name: spec.short_help for spec in state.plugins().registry.all("command")}
    except SwiftcoreError:
        return {}


def _plugin_command_index() -> dict[str, str]:
    from swiftcore._plugins import discover

    return {cmd: info.name for info in discover().values() for cmd in info.capabilities.get("command", ())}


class _PluginCommand(click.Command):
    """Stands in for a plugin's command until it runs; then the plugin is loaded and it takes over."""

    def __init__(self, name: str) -> None:
        super().__init__(
            name, context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []}
        )

    def resolve_target(self, plugins: PluginSet) -> click.Command:
        """The plugin's own ``click.Command`` for this name, from the loaded ``plugins``."""
        from swiftcore._lazy import resolve

        spec = plugins.registry.get("command", self.name or "")
        command = resolve(spec.target, what=f"command {self.name!r} of {spec.provider}")
        if not isinstance(command, click.Command):
            raise SwiftcoreError(f"command {self.name!r} of {spec.provider}: {spec.target!r} is not a click command")
        return command

    def invoke(self, ctx: click.Context) -> Any:
        state = ctx.find_object(CliState) or CliState()
        extra = with_provider(state, plugin_args(ctx.args), "command", self.name or "")
        command = self.resolve_target(state.plugins(extra))
        # obj=state: the command sees the same loaded plugin set (pass_state) rather than loading its own.
        return command.main(ctx.args, prog_name=f"swiftcore {self.name}", standalone_mode=False, obj=state)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", message=f"swiftcore %(version)s (plugin API {API_VERSION_STRING})")
@plugin_option
@click.pass_context
def cli(ctx: click.Context, plugin_specs: tuple[str, ...]) -> None:
    """swiftcore: fine-tune, serve and convert models; each model family is a plugin.

    \b
    Start here:
      swiftcore plugins                 what is installed (no torch import)
      swiftcore make-tiny qwen3_5 DIR   a tiny random checkpoint to try things on
      swiftcore train --model DIR --dataset data.jsonl --tuner lora
    """
    ctx.ensure_object(CliState).plugin_specs.extend(plugin_specs)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; a :class:`SwiftcoreError` prints one clear line and exits with code 2."""
    try:
        # standalone_mode=False returns the exit code of click.exceptions.Exit instead of exiting.
        result = cli.main(args=argv, prog_name="swiftcore", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except SwiftcoreError as exc:
        click.echo(f"Error: {exc}", err=True)
        return exc.exit_code
    return result if isinstance(result, int) else 0


if __name__ == "__main__":  # pragma: no cover
    # `python -m` runs a second copy of this module as __main__: its CliState is not the one commands' pass_state finds.
    from swiftcore.cli.main import main as _main

    sys.exit(_main())
