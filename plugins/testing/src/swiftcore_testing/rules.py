"""The contract rules every plugin must keep, as functions returning problems.

Each rule has a short id (``import-is-light``) that every failure message starts with, so a red test
says which promise the plugin broke. The checks here are plugin-kind independent; the model, template,
bridge and head pipelines live in their own modules.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from swiftcore.api import SwiftcoreError

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = [
    "RULES",
    "ContractViolation",
    "api_problems",
    "core_clash_problems",
    "entry_point_module",
    "import_probe",
    "load_twice_problems",
    "conformance_problems",
    "reference_problems",
    "spec_problems",
    "violation",
]

#: rule id -> the promise it checks (the guide, docs/writing-a-plugin.md, lists the same rules).
RULES: dict[str, str] = {
    "entry-point-loads": "the plugin's entry point (or file) imports",
    "import-is-light": "importing the plugin imports no torch, transformers or megatron",
    "import-time-budget": "importing and registering the plugin stays under the import-time budget",
    "api-compatible": "SWIFTCORE_API is a 'MAJOR.MINOR' this core supports",
    "specs-validate": "every hook returns valid spec dataclasses",
    "references-resolve": "every lazy 'module:attr' reference imports",
    "references-conform": "every lazy reference is what its field promises (swiftcore.api.protocols)",
    "static-index-matches": "the pyproject capability index lists exactly what the hooks return",
    "no-core-clash": "no spec or command reuses a name swiftcore or another installed plugin provides",
    "load-twice-harmless": "loading the plugin twice registers the same specs once",
    "model-make-tiny-loads": "make_tiny writes a checkpoint that resolves to the spec and loads",
    "model-template-renders": "the model's default template renders and encodes the sample conversations, "
    "keeping every system prompt and reply",
    "model-template-official": "the model's template renders as its tokenizer's own chat template, its official "
    "chat template and its reference renderings do, byte for byte",
    "model-template-train-serve": "the model's template trains each reply after exactly the prompt inference uses, "
    "up to a token the generation config stops at",
    "model-lora-trains": "two LoRA steps give a finite, decreasing loss",
    "model-generates": "the tiny model generates with the transformers backend",
    "template-renders": "the template renders the sample conversations, keeping every system prompt and reply",
    "template-official": "the template matches its declared official chat template and its reference renderings "
    "byte for byte",
    "template-train-serve": "the template trains each reply after exactly the prompt inference uses, up to one "
    "of its stop words",
    "bridge-round-trip": "HF -> Megatron-core -> HF gives back the same tensors",
    "bridge-logit-parity": "the Megatron-core model's logits match transformers'",
    "head-pooled-shapes": "the head's pooled output has one row per input",
    "head-save-load": "a saved head loads back with the same outputs, in the format its saved_as promises",
}


class ContractViolation(AssertionError):
    """A plugin broke a contract rule; the message starts with the rule id."""


def violation(rule: str, problems: list[str] | str) -> ContractViolation:
    """Build the :class:`ContractViolation` for ``rule`` listing ``problems``.

    Args:
        rule: a key of :data:`RULES`.
        problems: one problem or several.
    """
    if rule not in RULES:
        raise KeyError(f"unknown contract rule {rule!r}")
    items = [problems] if isinstance(problems, str) else list(problems)
    body = "\n  - ".join(items)
    return ContractViolation(f"contract rule '{rule}' broken ({RULES[rule]}):\n  - {body}")


def entry_point_module(plugin: str) -> tuple[str, str]:
    """Where plugin ``plugin`` lives: ``(source, module_or_path)`` without importing it.

    Args:
        plugin: an entry-point name, distribution name, dotted module or ``.py`` path.

    Raises:
        PluginNotFoundError: nothing installed has that name.
    """
    from swiftcore.api.plugins import discover, resolve_plugin_spec

    infos = resolve_plugin_spec(plugin, discover())
    return infos[0].source, infos[0].module


def import_module(plugin: str) -> ModuleType:
    """Import ``plugin``'s module (no API check, no registration), as the loader would."""
    from swiftcore.api.plugins import import_plugin_file

    source, module = entry_point_module(plugin)
    if source == "file":
        return import_plugin_file(Path(module))
    return importlib.import_module(module.partition(":")[0])


def import_probe(plugin: str, timeout: float = 120.0) -> dict[str, Any]:
    """Load ``plugin`` alone in a fresh interpreter with :func:`swiftcore.api.plugins.check_plugin`; return its report.

    When loading fails there (so ``_check`` could not say what got imported), the module is imported
    bare in a second interpreter to report its heavy imports and import time anyway.
    """
    # _check also imports every lazy reference, which pulls in transformers (~10 s); the contract checks
    # references in-process (rule references-resolve), so the probe skips that part.
    code = (
        "import json, sys\n"
        "from swiftcore.api.plugins import check_plugin\n"
        "print(json.dumps(check_plugin(sys.argv[1], resolve_references=False)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code, plugin], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise SwiftcoreError(f"check_plugin({plugin!r}) failed in a subprocess:\n{done.stderr[-2000:]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    if "heavy_imports" not in report:
        # Why it is repeated bare: the full load stopped before _check could measure anything.
        code = (
            "import json, sys, time\n"
            "from swiftcore.api.plugins import heavy_modules_loaded\n"
            "from swiftcore_testing.rules import import_module\n"
            "before = heavy_modules_loaded(); start = time.perf_counter()\n"
            "try:\n    import_module(sys.argv[1]); error = None\n"
            "except Exception as exc:\n    error = f'{type(exc).__name__}: {exc}'\n"
            "print(json.dumps({'import_seconds': round(time.perf_counter() - start, 4), 'error': error,"
            " 'heavy_imports': [m for m in heavy_modules_loaded() if m not in before]}))\n"
        )
        bare = subprocess.run([sys.executable, "-c", code, plugin], capture_output=True, text=True, timeout=timeout)
        if bare.returncode == 0:
            extra = json.loads(bare.stdout.strip().splitlines()[-1])
            report["heavy_imports"] = extra["heavy_imports"]
            report["import_seconds"] = extra["import_seconds"]
            report["import_error"] = extra["error"]
    return report


def api_problems(module: ModuleType, who: str) -> list[str]:
    """``SWIFTCORE_API`` problems of an imported plugin module (empty when compatible)."""
    from swiftcore.api import IncompatiblePluginError
    from swiftcore.api.plugins import check_api_version, core_version, declared_api

    try:
        check_api_version(declared_api(module), who, core_version())
    except IncompatiblePluginError as exc:
        return [str(exc)]
    return []


def own_specs(plugins: PluginSet, names: set[str]) -> dict[str, list[Any]]:
    """kind -> the specs the plugins called ``names`` provide (raises on a bad spec)."""
    from swiftcore.api.plugins import SPEC_KINDS

    out: dict[str, list[Any]] = {}
    for kind in SPEC_KINDS:
        specs = [s for s in plugins.registry.all(kind) if s.provider.plugin in names]
        if specs:
            out[kind] = specs
    return out


def spec_problems(plugins: PluginSet, names: set[str]) -> list[str]:
    """Bad specs: collecting every kind from the explicitly loaded plugins raises for each."""
    from swiftcore.api.plugins import SPEC_KINDS

    problems = []
    for kind in SPEC_KINDS:
        try:
            plugins.registry.all(kind)
        except SwiftcoreError as exc:
            problems.append(str(exc))
    return problems


def reference_problems(specs: dict[str, list[Any]]) -> list[str]:
    """Every lazy ``"module:attr"`` field of ``specs`` that does not import."""
    from swiftcore.api.plugins import unresolved_references

    return unresolved_references(specs)


def conformance_problems(specs: dict[str, list[Any]]) -> list[str]:
    """Every lazy reference that imports but is not what its field promises: a template factory without
    ``encode``, a recipe ``run`` that cannot take ``(cfg, plugins, options)``, ... (see
    :data:`swiftcore.api.protocols.REFERENCE_PROTOCOLS`). References that do not import are
    ``references-resolve``'s to report."""
    from swiftcore.api import resolve
    from swiftcore.api.protocols import REFERENCE_PROTOCOLS
    from swiftcore.api.protocols import conformance_problems as check

    problems = []
    for kind, items in specs.items():
        for spec in items:
            for ref_field in type(spec)._references:
                reference = getattr(spec, ref_field)
                expected = REFERENCE_PROTOCOLS.get((kind, ref_field))
                if reference is None or expected is None:
                    continue
                try:
                    obj = resolve(reference, what=reference)
                except SwiftcoreError:
                    continue
                try:
                    problems += check(obj, expected, f"{kind} {spec.name!r} {ref_field} {reference!r}")
                except Exception as exc:  # a zero-argument factory may raise anything
                    problems.append(
                        f"{kind} {spec.name!r} {ref_field} {reference!r}: raised {type(exc).__name__}: {exc}"
                    )
    return problems


def core_clash_problems(
    specs: dict[str, list[Any]], plugins: PluginSet, names: set[str], installed: Any = None
) -> list[str]:
    """Names the plugin shares with another provider: swiftcore's built-ins, the plugins loaded beside it,
    or any installed plugin; and commands named like core commands. Each problem names both providers.

    Two providers of one name are not an error until the name is used, and then the error falls on
    whoever uses it (a model whose default template is the clashing name, a user's ``--template``); so
    the kit reports the clash itself, on the plugin that takes the name.

    Args:
        specs: the plugin's specs by kind (see :func:`own_specs`).
        plugins: the plugin set they were loaded in (built-ins, dependencies and ``also_load`` included).
        names: the plugin names under test.
        installed: every installed plugin, loaded (default: loaded here as swiftcore loads them when
            no ``--plugin`` is given; a plugin that fails to load is skipped with a warning).
    """
    from swiftcore.api.plugins import CORE_COMMANDS, load_plugins

    if installed is None:
        installed = load_plugins(env={})
    problems: list[str] = []
    seen: set[tuple[str, str, frozenset[str]]] = set()
    for kind, items in specs.items():
        providers = _providers(kind, (plugins, installed))
        for spec in items:
            for other in providers.get(spec.name, {}).values():
                pair = (kind, spec.name, frozenset((spec.provider.plugin, other.plugin)))
                if other.plugin == spec.provider.plugin or pair in seen:
                    continue
                seen.add(pair)
                problems.append(_clash_message(kind, spec, other))
    # The registry refuses core command names before they become specs, so ask the hooks directly.
    for impl in plugins.pm.hook.swiftcore_register_commands.get_hookimpls():
        if impl.plugin_name not in names:
            continue
        registered: Any = impl.function() or []  # a hook implementation: untyped to pluggy
        for spec in registered:
            if getattr(spec, "name", None) in CORE_COMMANDS:
                problems.append(f"command {spec.name!r} is a core command and is refused; rename it")
    return problems


def _providers(kind: str, plugin_sets: tuple[Any, ...]) -> dict[str, dict[str, Any]]:
    """spec name -> plugin name -> :class:`~swiftcore.api.Provider`, over every given plugin set."""
    out: dict[str, dict[str, Any]] = {}
    for plugin_set in plugin_sets:
        for spec in plugin_set.registry.all(kind):
            out.setdefault(spec.name, {}).setdefault(spec.provider.plugin, spec.provider)
    return out


def _clash_message(kind: str, spec: Any, other: Any) -> str:
    """What a plugin author reads about ``spec`` sharing its name with ``other``'s (both named)."""
    from swiftcore.api.plugins import BUILTIN_PLUGIN

    if other.plugin == BUILTIN_PLUGIN:
        return f"{kind} {spec.name!r} of plugin {spec.provider} has the name of swiftcore's built-in {kind}; rename it"
    return (
        f"{kind} {spec.name!r} is provided by plugin {spec.provider} and by plugin {other}: with both installed, "
        f"the name is ambiguous until users write '{spec.name}@{spec.provider.plugin}' or "
        f"'{spec.name}@{other.plugin}'; rename one of them (a plugin-specific prefix avoids this)"
    )


def load_twice_problems(plugin: str) -> list[str]:
    """Loading ``plugin`` twice (twice in one ``--plugin`` list, and in two plugin sets) must change nothing."""
    from swiftcore.api.plugins import load_plugins

    first = load_plugins([plugin], env={})
    names = set(first.explicit)
    once = _signature(own_specs(first, names))
    problems = []
    try:
        again = load_plugins([plugin, plugin], env={})
    except SwiftcoreError as exc:
        return [f"--plugin {plugin} --plugin {plugin} failed: {exc}"]
    twice = _signature(own_specs(again, set(again.explicit)))
    if twice != once:
        problems.append(f"asked for twice, the plugin provides {twice} instead of {once}")
    third = _signature(own_specs(load_plugins([plugin], env={}), names))
    if third != once:
        problems.append(f"a second plugin set sees {third} instead of {once}: the hooks keep global state")
    return problems


def _signature(specs: dict[str, list[Any]]) -> dict[str, list[Any]]:
    return {kind: sorted(repr(s) for s in items) for kind, items in specs.items()}
