"""swiftcore: a slim, plugin-based core for fine-tuning, serving and converting models.

Importing this package is cheap: it never imports torch, transformers or megatron. Plugins import the public
API, :mod:`swiftcore.api` (``from swiftcore.api import hookimpl, ModelSpec``); the names plugin API 1.0
documented here (``from swiftcore import hookimpl, ModelSpec, SwiftcoreError, ...``) are still served, from there.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["__version__", "load_plugins"]


def load_plugins(*args, **kwargs):  # type: ignore[no-untyped-def]
    """Discover and load plugins; see :func:`swiftcore._plugins.load_plugins`."""
    from swiftcore._plugins import load_plugins as _load

    return _load(*args, **kwargs)


def __getattr__(name: str) -> Any:
    # Served lazily from swiftcore.api (and the error tree), so that the two can never disagree.
    import swiftcore.api
    import swiftcore.errors

    for module in (swiftcore.api, swiftcore.errors):
        if name in module.__all__:
            return getattr(module, name)
    raise AttributeError(f"module 'swiftcore' has no attribute {name!r}")
