"""The registry: spec name -> spec, over the loaded plugins, with conflicts reported on use.

There is no global registry: this object is built from a :class:`~swiftcore._plugins.Plugins`
(a pluggy manager) and asks each plugin's collector hooks once. Every spec comes back stamped with
its :class:`~swiftcore.specs.Provider`. Two providers of one name are not an error until that name is
used; then :class:`~swiftcore.errors.ConflictError` names both, and ``name@plugin`` picks one.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from swiftcore.errors import ConflictError, PluginError, SwiftcoreError, UnknownNameError
from swiftcore.specs import SPEC_KINDS

if TYPE_CHECKING:
    from swiftcore._plugins import Plugins

__all__ = ["CORE_COMMANDS", "HOOK_FOR_KIND", "Registry"]

HOOK_FOR_KIND = {
    "model": "swiftcore_register_models",
    "template": "swiftcore_register_templates",
    "head": "swiftcore_register_lm_heads",
    "bridge": "swiftcore_register_bridges",
    "backend": "swiftcore_register_backends",
    "command": "swiftcore_register_commands",
    "recipe": "swiftcore_register_recipes",
    "reward": "swiftcore_register_rewards",
    "environment": "swiftcore_register_environments",
}

#: Sub-commands of the core CLI; a plugin may not register a command with one of these names.
CORE_COMMANDS = ("plugins", "export", "template", "recipes", "rewards")

#: kind -> how the distributions providing it are named. An unknown name is told the pattern, never
#: ``pip install <the name typed>``: a typo would be an install command for whatever package has that name.
_INSTALL_HINT = {
    "model": "swiftcore-plugin-<name>",
    "template": "swiftcore-template-<name>",
    "head": "swiftcore-heads",
    "bridge": "swiftcore-bridge-<name>",
    "backend": "swiftcore-backend-<name>",
    "command": "swiftcore-plugin-<name>",
    "recipe": "swiftcore-recipe-<name>",
    "reward": "swiftcore-reward-<name>",
    "environment": "swiftcore-env-<name>",
}


class Registry:
    """Specs of every kind, collected from the loaded plugins.

    Args:
        plugins: the loaded plugin set.
    """

    def __init__(self, plugins: Plugins) -> None:
        self._plugins = plugins
        self._specs: dict[str, list[Any]] = {}
        #: Problems met while collecting (bad specs from auto-discovered plugins, refused commands).
        self.problems: list[str] = []

    # ------------------------------------------------------------------ collection

    def all(self, kind: str) -> list[Any]:
        """Every spec of ``kind`` (``model``, ``template``, ``head``, ``bridge``, ``backend``,
        ``command``, ``recipe``, ``reward``, ``environment``), duplicates included, ordered by name then plugin."""
        if kind not in SPEC_KINDS:
            raise ValueError(f"unknown spec kind {kind!r}; one of {', '.join(SPEC_KINDS)}")
        if kind not in self._specs:
            self._specs[kind] = self._collect(kind)
        return list(self._specs[kind])

    def _collect(self, kind: str) -> list[Any]:
        hook_name = HOOK_FOR_KIND[kind]
        spec_cls = SPEC_KINDS[kind]
        hook = getattr(self._plugins.pm.hook, hook_name)
        collected: list[Any] = []
        impls = sorted(hook.get_hookimpls(), key=lambda impl: impl.plugin_name)
        for impl in impls:
            info = self._plugins.infos.get(impl.plugin_name)
            if info is None or info.status != "loaded":
                continue
            try:
                result = impl.function()
                specs = _check_result(result, spec_cls, hook_name)
            except SwiftcoreError as exc:
                self._report(info.name, f"{info.describe()}: {hook_name}() returned a bad spec: {exc}")
                continue
            except Exception as exc:  # plugin code may raise anything
                self._report(info.name, f"{info.describe()}: {hook_name}() raised {type(exc).__name__}: {exc}")
                continue
            for spec in specs:
                if kind == "command" and spec.name in CORE_COMMANDS:
                    self._report(
                        info.name,
                        f"{info.describe()} registers command {spec.name!r}, which is a core command; plugins cannot "
                        "replace core commands, so it was refused. Rename the plugin's command.",
                        always_warn=True,
                    )
                    continue
                collected.append(spec.with_provider(info.provider))
        collected.sort(key=lambda s: (s.name, s.provider.plugin))
        return collected

    def _report(self, plugin: str, message: str, always_warn: bool = False) -> None:
        if plugin in self._plugins.explicit and not always_warn:
            raise PluginError(message)
        self.problems.append(message)
        print(f"swiftcore: warning: {message}", file=sys.stderr)

    # ------------------------------------------------------------------ look-up

    def names(self, kind: str) -> list[str]:
        """The distinct names of ``kind``, sorted."""
        return sorted({s.name for s in self.all(kind)})

    def providers(self, kind: str, name: str) -> list[Any]:
        """Every spec of ``kind`` called ``name`` (one per providing plugin)."""
        return [s for s in self.all(kind) if s.name == name]

    def conflicts(self) -> dict[tuple[str, str], list[Any]]:
        """``(kind, name) -> specs`` for every name with more than one provider."""
        out: dict[tuple[str, str], list[Any]] = {}
        for kind in SPEC_KINDS:
            for name in self.names(kind):
                found = self.providers(kind, name)
                if len(found) > 1:
                    out[(kind, name)] = found
        return out

    def find(self, kind: str, name: str) -> Any | None:
        """Like :meth:`get` but None when nothing has that name (conflicts still raise)."""
        try:
            return self.get(kind, name)
        except UnknownNameError:
            return None

    def get(self, kind: str, name: str) -> Any:
        """The spec of ``kind`` called ``name``; ``name@plugin`` picks one provider.

        Raises:
            UnknownNameError: no loaded plugin provides it (with close matches and an install hint).
            ConflictError: several plugins provide it and none was picked.
        """
        base, _, plugin = name.partition("@")
        found = self.providers(kind, base)
        if plugin:
            picked = [s for s in found if s.provider.plugin == plugin or s.provider.distribution == plugin]
            if not picked:
                have = ", ".join(str(s.provider) for s in found) or "no plugin"
                raise UnknownNameError(f"{kind} {base!r} is not provided by plugin {plugin!r} (provided by: {have})")
            found = picked
        if not found:
            raise UnknownNameError(self._unknown_message(kind, base))
        if len(found) > 1:
            providers = " and ".join(str(s.provider) for s in found)
            raise ConflictError(
                f"{kind} {base!r} is provided by {providers}; pick one with "
                f"'{base}@{found[-1].provider.plugin}' (or block the other with --plugin no:NAME)"
            )
        return found[0]

    def _unknown_message(self, kind: str, name: str) -> str:
        names = self.names(kind)
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
        msg = f"no loaded plugin provides a {kind} called {name!r}."
        if close:
            msg += f" Did you mean: {', '.join(close)}?"
        elif names:
            msg += f" Available: {', '.join(names)}."
        index_owner = self._index_owner(kind, name)
        if index_owner:
            msg += f" Plugin {index_owner!r} declares it but is not loaded; add --plugin {index_owner}."
        else:
            msg += (
                f" A {kind} comes from a plugin distribution named like {_INSTALL_HINT[kind]}; check the name "
                "and its publisher before installing one (`swiftcore plugins` lists what is installed)."
            )
        return msg

    def _index_owner(self, kind: str, name: str) -> str | None:
        for info in self._plugins.infos.values():
            if name in info.capabilities.get(kind, ()) and info.status != "loaded":
                return info.name
        return None


def _check_result(result: object, spec_cls: type, hook_name: str) -> Iterable[Any]:
    if result is None:
        return []
    if not isinstance(result, (list, tuple)):
        raise SwiftcoreError(f"expected a list of {spec_cls.__name__}, got {type(result).__name__}")
    bad = [type(item).__name__ for item in result if not isinstance(item, spec_cls)]
    if bad:
        raise SwiftcoreError(f"expected {spec_cls.__name__} items, got {', '.join(bad)}")
    return result
