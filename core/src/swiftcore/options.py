"""Command-line options that plugins add to swiftcore commands (the ``swiftcore_addoption`` hook).

Modelled on pytest's ``pytest_addoption(parser)``: a plugin gets a parser, opens a group and adds
options with the same keywords as :func:`click.option`. A group belongs to one command, ``train`` unless
``command=`` says otherwise (``export``: swiftcore-megatron's ``--tp``); a ``train`` group may belong to a recipe,
its options then valid only with that recipe (``swiftcore train --recipe NAME``), which receives their values::

    @hookimpl
    def swiftcore_addoption(parser):
        group = parser.getgroup("toy", "the toy recipe", recipe="toy")
        group.addoption("--toy-scale", type=float, default=1.0, help="How much the toy scales.")

The core's own options are not declared here (they come from :class:`swiftcore_train.config.TrainConfig`);
a plugin option whose flag or destination clashes with one of them, or with another plugin's, is refused
with a message naming both owners. No click import at module level is needed by plugins: they only call
:meth:`OptionGroup.addoption`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from swiftcore.errors import SwiftcoreError

if TYPE_CHECKING:
    from swiftcore.api.protocols import PluginSet

__all__ = ["OptionGroup", "OptionParser", "PluginOption", "collect_options"]


@dataclass(frozen=True)
class PluginOption:
    """One option a plugin added: its flags, click keywords, destination and owner."""

    flags: tuple[str, ...]
    kwargs: dict[str, Any]
    dest: str
    group: str
    recipes: tuple[str, ...]
    plugin: str

    def applies_to(self, recipe: str) -> bool:
        """Whether the option is valid with ``recipe`` (an option of no recipe is valid with all; ``NAME.ENGINE``,
        the recipe on another engine, takes ``NAME``'s, so the engine's plugin need not be named by the recipe's)."""
        return not self.recipes or recipe in self.recipes or recipe.partition(".")[0] in self.recipes

    def click_option(self) -> Any:
        """The :class:`click.Option` for this option (its help names the group or recipe)."""
        import click

        kwargs = dict(self.kwargs)
        scope = f"[recipe {'|'.join(self.recipes)}] " if self.recipes else f"[{self.group}] "
        kwargs["help"] = scope + str(kwargs.get("help", ""))
        kwargs.setdefault("show_default", kwargs.get("default") not in (None, (), ""))
        return click.Option([*self.flags, self.dest], **kwargs)  # the bare name is click's destination


@dataclass
class OptionGroup:
    """A named group of options of one command; ``recipes`` set means they belong to those recipes alone."""

    name: str
    description: str
    recipes: tuple[str, ...]
    _parser: OptionParser
    command: str = "train"

    def addoption(self, *flags: str, **kwargs: Any) -> None:
        """Add an option, with :func:`click.option`'s keywords (``type``, ``default``, ``multiple``,
        ``is_flag``, ``help``...). The destination is the first long flag without dashes (``--toy-scale``
        -> ``toy_scale``) unless ``kwargs["dest"]`` names it."""
        self._parser._add(self, flags, kwargs)


@dataclass
class OptionParser:
    """What ``swiftcore_addoption`` implementations receive for one command.

    Args:
        command: the command being built (``"train"``).
        reserved: flag or destination -> owner for the names already taken (the core's options).
    """

    command: str
    reserved: dict[str, str] = field(default_factory=dict)
    options: list[PluginOption] = field(default_factory=list)
    groups: dict[tuple[str, str], OptionGroup] = field(default_factory=dict)
    #: The plugin whose hook implementation is running (set by :func:`collect_options`).
    current_plugin: str = "?"

    def getgroup(
        self, name: str, description: str = "", *, recipe: str | tuple[str, ...] | None = None, command: str = "train"
    ) -> OptionGroup:
        """The group called ``name`` of ``command`` (created on first use; plugins written before other commands took
        options add to ``train``). ``recipe`` (a name, or a tuple of names several recipes share) ties its options
        to those recipes. Options of another command than the one being built are left out."""
        recipes = (recipe,) if isinstance(recipe, str) else tuple(recipe or ())
        group = self.groups.get((command, name))
        if group is None:
            group = self.groups[(command, name)] = OptionGroup(name, description, recipes, self, command)
        elif recipes and group.recipes != recipes:
            raise SwiftcoreError(
                f"plugin {self.current_plugin!r}: option group {name!r} belongs to recipe(s) "
                f"{', '.join(group.recipes) or '(all)'}, not {', '.join(recipes)}; use a group of its own"
            )
        return group

    def addoption(self, *flags: str, **kwargs: Any) -> None:
        """Add an option outside any recipe (valid with every recipe), in the plugin's general group."""
        self._add(self.getgroup(self.current_plugin), flags, kwargs)

    def _add(self, group: OptionGroup, flags: tuple[str, ...], kwargs: dict[str, Any]) -> None:
        if group.command != self.command:
            return
        owner = f"plugin {self.current_plugin!r}"
        if not flags or not all(isinstance(f, str) and f.startswith("-") for f in flags):
            raise SwiftcoreError(f"{owner}: addoption{flags!r}: give one or more flags such as '--my-option'")
        kwargs = dict(kwargs)
        dest = kwargs.pop("dest", None) or _dest(flags)
        for name in (*(f.split("/")[0] for f in flags), dest):
            if name in self.reserved:
                raise SwiftcoreError(
                    f"{owner} adds option {name!r} to `swiftcore {self.command}`, which {self.reserved[name]} "
                    "already has; rename the plugin's option"
                )
        option = PluginOption(tuple(flags), kwargs, dest, group.name, group.recipes, self.current_plugin)
        for name in (*(f.split("/")[0] for f in flags), dest):
            self.reserved[name] = owner
        self.options.append(option)


def _dest(flags: tuple[str, ...]) -> str:
    long = [f for f in flags if f.startswith("--")] or list(flags)
    return long[0].split("/")[0].lstrip("-").replace("-", "_")


def collect_options(plugins: PluginSet, command: str, reserved: dict[str, str]) -> list[PluginOption]:
    """Call every loaded plugin's ``swiftcore_addoption`` for ``command`` and return what they added.

    Each implementation is called on its own (like the registry's collectors), so an error names the plugin.

    Raises:
        SwiftcoreError: a clash with a core option or another plugin's, or a bad ``addoption`` call.
    """
    parser = OptionParser(command, dict(reserved))
    hook = plugins.pm.hook.swiftcore_addoption
    for impl in sorted(hook.get_hookimpls(), key=lambda i: i.plugin_name):
        info = plugins.infos.get(impl.plugin_name)
        if info is None or info.status != "loaded":
            continue
        parser.current_plugin = info.name
        try:
            impl.function(parser=parser)
        except SwiftcoreError:
            raise
        except Exception as exc:  # plugin code may raise anything
            raise SwiftcoreError(
                f"{info.describe()}: swiftcore_addoption() raised {type(exc).__name__}: {exc}"
            ) from exc
    return parser.options
