"""Render the hook reference (``docs/hooks.md``) from :mod:`swiftcore.hookspecs` and the hooks plugins declare.

``python scripts/hookdocs.py > docs/hooks.md`` regenerates it; a test fails when the file and the
specs disagree, so the reference can never go stale. A development script, not part of the installed core.
The hooks of this repository's plugins (``swiftcore_addhooks``, :data:`PLUGIN_HOOKSPECS`) follow the core's.
"""

from __future__ import annotations

import importlib
import inspect
from types import ModuleType

from swiftcore import hookspecs
from swiftcore.plugin_api import API_VERSION_STRING

__all__ = ["PLUGIN_HOOKSPECS", "render_hook_reference"]

#: Hook specification modules of this repository's plugins: distribution -> module.
PLUGIN_HOOKSPECS = {
    "swiftcore-train": "swiftcore_train.hookspecs",
    "swiftcore-infer": "swiftcore_infer.hookspecs",
    "swiftcore-serve": "swiftcore_serve.hookspecs",
}


def render_hook_reference() -> str:
    """The markdown hook reference: every hook's exact signature, call semantics and docstring."""
    lines = [
        "# Hook reference",
        "",
        f"Generated from `swiftcore/hookspecs.py` (plugin API {API_VERSION_STRING}) by "
        "`python scripts/hookdocs.py`; a test keeps it in sync.",
        "",
        "Implement a hook with `@swiftcore.hookimpl` in your plugin module. An implementation may take fewer",
        "arguments than the spec (pluggy passes only those it names), so hooks can grow without breaking you.",
        "",
    ]
    lines += _render_hooks(hookspecs, "##")
    lines += [
        "## Hooks plugins declare",
        "",
        "A plugin declares hooks of its own with `swiftcore_addhooks`; other plugins implement them like the core's",
        "(the declaring plugin must be loaded for them to load). Their versions are the declaring distribution's.",
        "",
    ]
    for distribution, module in PLUGIN_HOOKSPECS.items():
        declared = importlib.import_module(module)
        lines += [f"### {distribution} (`{module}`)", "", (inspect.getdoc(declared) or "").split("\n\n")[0], ""]
        lines += _render_hooks(declared, "####")
    return "\n".join(lines).rstrip() + "\n"


def _render_hooks(module: ModuleType, heading: str) -> list[str]:
    """Every hook spec of ``module``: its heading, exact signature, call semantics and docstring."""
    lines: list[str] = []
    for name in sorted(n for n in dir(module) if n.startswith("swiftcore_")):
        func = getattr(module, name)
        opts = getattr(func, f"{hookspecs.PROJECT_NAME}_spec", None)
        if opts is None:
            continue  # not a hook specification (e.g. a helper)
        signature = _signature(func)
        lines += [f"{heading} `{name}`", "", "```python", f"def {name}{signature}", "```", ""]
        lines += [f"*{_semantics(name, opts)}*", "", inspect.getdoc(func) or "", ""]
    return lines


def _semantics(name: str, opts: dict) -> str:
    """How the caller calls the hook's implementations."""
    if opts.get("firstresult"):
        return "firstresult: stops at the first non-None result"
    if opts.get("historic"):
        return "historic: every implementation, including those of plugins registered after the call"
    if name.startswith("swiftcore_register_"):
        return "collector: each implementation called on its own, at most once per process; all results"
    return "all results"


def _signature(func: object) -> str:
    # Annotations are strings (postponed evaluation); print them bare, as they are written in the source.
    sig = inspect.signature(func)  # type: ignore[arg-type]
    params = ", ".join(f"{p.name}: {p.annotation}" for p in sig.parameters.values())
    return f"({params}) -> {sig.return_annotation}"


if __name__ == "__main__":  # pragma: no cover
    print(render_hook_reference(), end="")
