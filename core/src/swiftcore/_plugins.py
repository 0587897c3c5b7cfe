"""Plugin discovery and loading.

Three phases, so that ``swiftcore plugins`` never runs plugin code:

1. **discover** (:func:`discover`): read the ``swiftcore.plugins`` entry points (and the static
   capability index groups ``swiftcore.models``, ``swiftcore.templates``, ...) from installed
   metadata. Nothing is imported.
2. **load** (:func:`load_plugins`): import the wanted plugin modules, check their
   ``SWIFTCORE_API``, and register them with a pluggy ``PluginManager``: the registry.
3. **materialize**: specs' ``"module:attr"`` strings are imported only when used.

What is loaded: with no ``--plugin`` and no ``SWIFTCORE_PLUGINS``, every discovered plugin (a broken one is reported on
stderr and skipped). ``--plugin SPEC`` (or ``SWIFTCORE_PLUGINS=a,b``; empty means none) loads only what was asked (and
the plugins its distribution requires, e.g. a model plugin's template plugin), and a failure there is an error.
``no:NAME`` blocks a plugin. The resolved set is written back to ``SWIFTCORE_PLUGINS`` so child processes (torchrun
ranks, servers) load exactly the same plugins.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

import pluggy

from swiftcore import hookspecs
from swiftcore.errors import IncompatiblePluginError, PluginError, PluginLoadError, PluginNotFoundError
from swiftcore.plugin_api import API_VERSION_STRING, check_api_version
from swiftcore.specs import Provider

__all__ = [
    "BUILTIN_PLUGIN",
    "ENTRY_POINT_GROUP",
    "ENV_PLUGINS",
    "INDEX_GROUPS",
    "PluginInfo",
    "Plugins",
    "clear_discovery_cache",
    "discover",
    "load_plugins",
    "new_plugin_manager",
    "requested_from_env",
    "required_plugins",
]

ENTRY_POINT_GROUP = "swiftcore.plugins"
#: Static capability index: entry-point group per spec kind; each entry point's name is a provided
#: spec name and its value the plugin module, so capabilities are listed without importing plugins.
INDEX_GROUPS = {
    "model": "swiftcore.models",
    "template": "swiftcore.templates",
    "head": "swiftcore.heads",
    "bridge": "swiftcore.bridges",
    "backend": "swiftcore.backends",
    "command": "swiftcore.commands",
    "recipe": "swiftcore.recipes",
    "reward": "swiftcore.rewards",
    "environment": "swiftcore.environments",
}
ENV_PLUGINS = "SWIFTCORE_PLUGINS"
ENV_STRICT = "SWIFTCORE_PLUGINS_STRICT"
BUILTIN_PLUGIN = "swiftcore"
_BUILTIN_MODULE = "swiftcore.builtin"


@dataclass
class PluginInfo:
    """One plugin: where it comes from and how loading it went.

    Attributes:
        name: the plugin name (entry-point name, module name, or file stem).
        module: the module to import (entry-point value, dotted module, or file path).
        distribution: the providing distribution (None for a module or file plugin).
        version: the distribution's version.
        source: ``entry-point``, ``module``, ``file`` or ``builtin``.
        capabilities: spec kind -> names, from the static index (or, once loaded, from the hooks).
        status: ``available``, ``loaded``, ``blocked``, ``failed`` or ``incompatible``.
        error: why it failed, when it did.
        api: the ``SWIFTCORE_API`` it declared, once loaded.
    """

    name: str
    module: str
    distribution: str | None = None
    version: str | None = None
    source: str = "entry-point"
    capabilities: dict[str, list[str]] = field(default_factory=dict)
    status: str = "available"
    error: str | None = None
    api: str | None = None

    @property
    def provider(self) -> Provider:
        """The :class:`Provider` stamped on this plugin's specs."""
        return Provider(self.name, self.distribution, self.version)

    def describe(self) -> str:
        """``plugin 'acme' (swiftcore-plugin-acme 0.2.0)``, for messages."""
        if self.distribution:
            return f"plugin {self.name!r} ({self.distribution} {self.version})"
        return f"plugin {self.name!r} ({self.source} {self.module})"

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view (``swiftcore plugins --json``)."""
        return {
            "name": self.name,
            "module": self.module,
            "distribution": self.distribution,
            "version": self.version,
            "source": self.source,
            "provides": {k: sorted(v) for k, v in sorted(self.capabilities.items()) if v},
            "status": self.status,
            "error": self.error,
            "api": self.api,
        }


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@lru_cache(maxsize=1)
def _discover_cached() -> tuple[tuple[str, PluginInfo], ...]:
    found: dict[str, PluginInfo] = {}
    for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        dist = getattr(ep, "dist", None)
        info = PluginInfo(
            name=ep.name,
            module=ep.value,
            distribution=dist.name if dist else None,
            version=dist.version if dist else None,
        )
        if ep.name in found and found[ep.name].module != ep.value:
            # Two distributions claim one plugin name: keep the first, report on use.
            info.status = "failed"
            info.error = (
                f"plugin name {ep.name!r} is also registered by {found[ep.name].distribution}; uninstall one of them"
            )
            found[f"{ep.name}@{info.distribution}"] = info
            continue
        found[ep.name] = info
    by_module = {(i.distribution, i.module): i for i in found.values()}
    for kind, group in INDEX_GROUPS.items():
        for ep in metadata.entry_points(group=group):
            dist = getattr(ep, "dist", None)
            owner = by_module.get((dist.name if dist else None, ep.value))
            if owner is not None:
                owner.capabilities.setdefault(kind, []).append(ep.name)
    return tuple(found.items())


def discover() -> dict[str, PluginInfo]:
    """Return the installed plugins by name, read from entry-point metadata (nothing imported).

    The metadata scan is cached per process; :func:`clear_discovery_cache` forgets it. Each call
    returns fresh :class:`PluginInfo` copies.
    """
    from copy import deepcopy

    return {name: deepcopy(info) for name, info in _discover_cached()}


def clear_discovery_cache() -> None:
    """Forget the cached entry-point scan (after installing a plugin in-process, in tests)."""
    _discover_cached.cache_clear()
    importlib.invalidate_caches()


def new_plugin_manager() -> pluggy.PluginManager:
    """A pluggy manager with swiftcore's hook specs (plugins add theirs: swiftcore_addhooks), nothing registered."""
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    pm.hook.swiftcore_addhooks.call_historic(kwargs={"pluginmanager": pm})  # plugins registered later get it too
    return pm


def requested_from_env(env: Mapping[str, str] | None = None) -> list[str] | None:
    """Parse ``SWIFTCORE_PLUGINS``: None when unset, ``[]`` when set but empty (load none)."""
    env = os.environ if env is None else env
    raw = env.get(ENV_PLUGINS)
    if raw is None:
        return None
    return [part.strip() for part in raw.split(",") if part.strip()]


def _core_version() -> str:
    from swiftcore import __version__

    return __version__


class Plugins:
    """The loaded plugin set: a pluggy manager, what was discovered, and how loading went.

    Use :attr:`registry` to look specs up by name.
    """

    def __init__(
        self, pm: pluggy.PluginManager, infos: dict[str, PluginInfo], explicit: set[str], resolved_specs: list[str]
    ) -> None:
        self.pm = pm
        self.infos = infos
        self.explicit = explicit
        self.resolved_specs = resolved_specs
        self._registry: Any = None

    @property
    def registry(self) -> Any:
        """The :class:`~swiftcore.registry.Registry` over the loaded plugins (built on first use)."""
        if self._registry is None:
            from swiftcore.registry import Registry

            self._registry = Registry(self)
        return self._registry

    def loaded(self) -> list[PluginInfo]:
        """The plugins that are registered, built-ins included."""
        return [i for i in self.infos.values() if i.status == "loaded"]

    def add(
        self,
        plugin: object,
        name: str,
        *,
        distribution: str | None = None,
        version: str | None = None,
        explicit: bool = True,
    ) -> PluginInfo:
        """Register an already-imported plugin object (a module or class with hookimpls) under ``name``.

        Checked as discovered plugins are (add a plugin declaring hooks before those implementing them). Used by
        tests and embedding applications; the CLI loads plugins with :func:`load_plugins`.
        """
        module = getattr(plugin, "__name__", type(plugin).__name__)
        info = PluginInfo(name=name, module=module, distribution=distribution, version=version, source="module")
        check_api_version(getattr(plugin, "SWIFTCORE_API", None), info.describe(), _core_version())
        info.api = plugin.SWIFTCORE_API  # type: ignore[attr-defined]
        self.pm.register(plugin, name=name)
        if _hooks_refused(self.pm, info):
            raise PluginLoadError(info.error)
        info.status = "loaded"
        self.infos[name] = info
        if explicit:
            self.explicit.add(name)
        self._registry = None
        return info

    def remove(self, name: str) -> None:
        """Unregister the plugin called ``name`` (the inverse of :meth:`add`)."""
        self.pm.unregister(name=name)
        self.infos.pop(name, None)
        self.explicit.discard(name)
        self._registry = None

    def child_env(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """``env`` (default: this process's) with ``SWIFTCORE_PLUGINS`` set to this plugin set."""
        out = dict(os.environ if env is None else env)
        out[ENV_PLUGINS] = ",".join(self.resolved_specs)
        return out


def _import_file(path: Path) -> ModuleType:
    module_name = "swiftcore_local_" + re.sub(r"\W", "_", path.stem)
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


def _declared_api(module: ModuleType) -> object:
    if hasattr(module, "SWIFTCORE_API"):
        return module.SWIFTCORE_API
    package = module.__name__.rpartition(".")[0]
    while package:
        parent = sys.modules.get(package)
        if parent is not None and hasattr(parent, "SWIFTCORE_API"):
            return parent.SWIFTCORE_API
        package = package.rpartition(".")[0]
    return None


def _resolve_spec(spec: str, discovered: dict[str, PluginInfo]) -> list[PluginInfo]:
    """Map one ``--plugin`` value to the plugins it names (see the module docstring)."""
    looks_like_path = spec.endswith(".py") or "/" in spec or os.sep in spec
    if looks_like_path:
        path = Path(spec).expanduser()
        if not path.is_file():
            raise PluginNotFoundError(f"--plugin {spec!r}: no such file")
        path = path.resolve()
        return [PluginInfo(name=path.stem, module=str(path), source="file")]

    candidates: dict[str, list[PluginInfo]] = {}
    if spec in discovered:
        candidates["entry point"] = [discovered[spec]]
    wanted_dist = _normalize(spec)
    by_dist = [i for i in discovered.values() if i.distribution and _normalize(i.distribution) == wanted_dist]
    if by_dist:
        candidates["distribution"] = by_dist
    same_package = any(
        i.module.partition(":")[0] == spec or i.module.startswith(spec + ".")
        for infos in candidates.values()
        for i in infos
    )
    if not same_package and spec.replace(".", "").replace("_", "").isalnum() and not spec[0].isdigit():
        try:
            found = importlib.util.find_spec(spec)
        except (ImportError, ValueError):
            found = None
        # A folder without __init__.py (a checkpoint in the working directory, on sys.path under `python -m`) imports
        # as a namespace package (no origin): it is never a plugin module, so it cannot shadow an entry point.
        if found is not None and found.origin not in (None, "namespace"):
            candidates["module"] = [PluginInfo(name=spec, module=spec, source="module")]

    targets = {tuple(sorted(i.module for i in infos)) for infos in candidates.values()}
    if len(targets) > 1:
        listing = "; ".join(f"{how} -> {', '.join(i.module for i in infos)}" for how, infos in candidates.items())
        raise PluginError(
            f"--plugin {spec!r} is ambiguous: {listing}. Use the entry-point name, the "
            "distribution name or a path that names only one."
        )
    if candidates:
        return next(iter(candidates.values()))

    known = sorted(set(discovered) | {i.distribution for i in discovered.values() if i.distribution})
    close = difflib.get_close_matches(spec, known, n=3, cutoff=0.5)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    # No "pip install <what you typed>" hint: a typo turned into an install command is how typosquatted
    # packages get installed. Installed names are listed by `swiftcore plugins`.
    raise PluginNotFoundError(
        f"--plugin {spec!r}: no installed plugin, distribution, module or file has that name.{hint} "
        "`swiftcore plugins` lists what is installed; install a plugin by its exact distribution name "
        "(pip install DISTRIBUTION, or pip install ./path for one in this repository)"
    )


def required_plugins(info: PluginInfo, discovered: dict[str, PluginInfo]) -> list[PluginInfo]:
    """Installed plugins whose distributions ``info``'s distribution requires, transitively (metadata only).

    A model plugin depends on its template plugin: ``--plugin gemma4`` must bring ``template_gemma`` along,
    or the model's default template would be missing. Optional extras (``[megatron]``) are not followed.
    """
    from packaging.requirements import Requirement

    by_dist: dict[str, list[PluginInfo]] = {}
    for other in discovered.values():
        if other.distribution:
            by_dist.setdefault(_normalize(other.distribution), []).append(other)
    todo = [info.distribution] if info.distribution else []
    seen: set[str] = set()
    found: list[PluginInfo] = []
    while todo:
        dist = _normalize(todo.pop())
        if dist in seen:
            continue
        seen.add(dist)
        try:
            requires = metadata.requires(dist) or []
        except metadata.PackageNotFoundError:
            continue
        for line in requires:
            req = Requirement(line)
            if req.marker is not None and "extra" in str(req.marker):
                continue
            name = _normalize(req.name)
            found.extend(p for p in by_dist.get(name, []) if p.name != info.name and p not in found)
            todo.append(name)
    return found


def _register(pm: pluggy.PluginManager, info: PluginInfo) -> None:
    """Import ``info``'s module, check its API version and hooks, and register it."""
    try:
        if info.source == "file":
            module = _import_file(Path(info.module))
        else:
            module = importlib.import_module(info.module.partition(":")[0])
    except Exception as exc:  # a plugin may raise anything on import
        raise PluginLoadError(
            f"{info.describe()} failed to import {info.module!r}: {type(exc).__name__}: {exc}"
        ) from exc
    api = _declared_api(module)
    info.api = api if isinstance(api, str) else None
    check_api_version(api, info.describe(), _core_version())
    if pm.is_registered(module):
        return  # loading twice (e.g. by entry point and by distribution) is harmless
    try:
        pm.register(module, name=info.name)
    except ValueError as exc:  # pluggy: name already registered by another object
        raise PluginLoadError(f"{info.describe()}: {exc}") from exc
    except pluggy.PluginValidationError as exc:  # pluggy names the plugin at fault: maybe one registered before
        if pm.is_registered(module):  # that implements a hook this one declares (swiftcore_addhooks) wrongly
            pm.unregister(module)
        raise PluginLoadError(f"{info.describe()}: {exc}") from exc
    info.status = "loaded"  # its hooks are checked once the whole set is (_hooks_refused)


def _hooks_refused(pm: pluggy.PluginManager, info: PluginInfo) -> bool:
    """Unregister a plugin implementing a hook that neither the core nor a registered plugin declares (a typo, a
    plugin left out), saying why in ``info``. Run on the whole set: one registered later may declare it (addhooks)."""
    plugin = pm.get_plugin(info.name)
    callers = [c for c in pm.get_hookcallers(plugin) or [] if not c.has_spec()]
    unknown = sorted({c.name for c in callers for i in c.get_hookimpls() if i.plugin is plugin and not i.optionalhook})
    if unknown:
        pm.unregister(plugin)
        info.status = "failed"
        info.error = (
            f"{info.describe()} implements unknown hook(s) {', '.join(unknown)}: neither swiftcore {_core_version()} "
            f"(plugin API {API_VERSION_STRING}) nor a loaded plugin declares them. Load the plugin that declares "
            "them (--plugin NAME), upgrade swiftcore, or mark the hook @hookimpl(optionalhook=True)."
        )
    return bool(unknown)


def _builtin_info() -> PluginInfo:
    return PluginInfo(
        name=BUILTIN_PLUGIN, module=_BUILTIN_MODULE, distribution="swiftcore", version=_core_version(), source="builtin"
    )


def load_plugins(
    requested: Sequence[str] = (), *, env: Mapping[str, str] | None = None, export_env: bool = False
) -> Plugins:
    """Discover, import and register plugins; return the loaded :class:`Plugins`.

    Args:
        requested: ``--plugin`` values (entry-point name, distribution name, dotted module, ``.py``
            path, or ``no:NAME``). Added to those in ``SWIFTCORE_PLUGINS``.
        env: the environment to read ``SWIFTCORE_PLUGINS`` and ``SWIFTCORE_PLUGINS_STRICT`` from
            (default: ``os.environ``).
        export_env: write the resolved set to ``os.environ["SWIFTCORE_PLUGINS"]`` so child
            processes load the same plugins (the CLI does this).

    Raises:
        PluginNotFoundError: a requested plugin does not exist (with close matches).
        PluginLoadError: a requested plugin failed to import or register.
        IncompatiblePluginError: a requested plugin targets another plugin API.
    """
    env = os.environ if env is None else env
    from_env = requested_from_env(env)
    specs = [*(from_env or []), *requested]
    blocked = {s[3:] for s in specs if s.startswith("no:")}
    positive = [s for s in specs if not s.startswith("no:")]
    explicit_mode = from_env is not None or bool(positive)
    strict_auto = env.get(ENV_STRICT, "") not in ("", "0")

    discovered = discover()
    pm = new_plugin_manager()
    builtin = _builtin_info()
    _register(pm, builtin)
    infos: dict[str, PluginInfo] = {BUILTIN_PLUGIN: builtin}
    infos.update(discovered)
    for name in blocked:
        pm.set_blocked(name)
        if name in infos:
            infos[name].status = "blocked"

    explicit: set[str] = set()
    resolved: list[str] = []
    if explicit_mode:
        seen: set[str] = set()
        for spec in positive:
            wanted = _resolve_spec(spec, discovered)
            for info in [*wanted, *(dep for w in wanted for dep in required_plugins(w, discovered))]:
                if info.name in blocked or info.name in seen:
                    continue
                seen.add(info.name)
                infos[info.name] = info
                _register(pm, info)
                explicit.add(info.name)
                resolved.append(info.module if info.source == "file" else info.name)
    else:
        for name, info in discovered.items():
            if info.status != "available" or name in blocked:
                if info.status == "failed":
                    _warn_skipped(info)
                continue
            try:
                _register(pm, info)
            except (PluginError, IncompatiblePluginError) as exc:
                if strict_auto:
                    raise
                info.status = "incompatible" if isinstance(exc, IncompatiblePluginError) else "failed"
                info.error = str(exc)
                _warn_skipped(info)
    for info in [i for i in infos.values() if i.status == "loaded" and _hooks_refused(pm, i)]:
        if explicit_mode or strict_auto:
            raise PluginLoadError(info.error)
        _warn_skipped(info)
    if not explicit_mode:
        resolved = [name for name, info in discovered.items() if info.status == "loaded"]
    resolved.extend(f"no:{name}" for name in sorted(blocked))
    plugins = Plugins(pm, infos, explicit, resolved)
    if export_env:
        os.environ[ENV_PLUGINS] = ",".join(resolved)
    return plugins


def _warn_skipped(info: PluginInfo) -> None:
    print(
        f"swiftcore: warning: skipped {info.describe()}: {info.error}\n"
        f"  (set SWIFTCORE_PLUGINS_STRICT=1 to make this an error, or --plugin no:{info.name} to silence it)",
        file=sys.stderr,
    )
