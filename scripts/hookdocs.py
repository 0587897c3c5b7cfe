"""Render the hook reference (``docs/hooks.md``) from :mod:`swiftcore.hookspecs`.

``python scripts/hookdocs.py > docs/hooks.md`` regenerates it; a test fails when the file and the
specs disagree, so the reference can never go stale. A development script, not part of the installed core.
"""

from __future__ import annotations

import inspect

from swiftcore import hookspecs
from swiftcore.plugin_api import API_VERSION_STRING

__all__ = ["render_hook_reference"]


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
    for name in sorted(n for n in dir(hookspecs) if n.startswith("swiftcore_")):
        func = getattr(hookspecs, name)
        opts = getattr(func, f"{hookspecs.PROJECT_NAME}_spec", {}) or {}
        signature = _signature(func)
        semantics = "firstresult: stops at the first non-None result" if opts.get("firstresult") else "all results"
        lines += [f"## `{name}`", "", "```python", f"def {name}{signature}", "```", "", f"*{semantics}*", ""]
        lines += [inspect.getdoc(func) or "", ""]
    return "\n".join(lines).rstrip() + "\n"


def _signature(func: object) -> str:
    # Annotations are strings (postponed evaluation); print them bare, as they are written in the source.
    sig = inspect.signature(func)  # type: ignore[arg-type]
    params = ", ".join(f"{p.name}: {p.annotation}" for p in sig.parameters.values())
    return f"({params}) -> {sig.return_annotation}"


if __name__ == "__main__":  # pragma: no cover
    print(render_hook_reference(), end="")
