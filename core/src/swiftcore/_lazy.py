"""Resolve lazy ``"module:attr"`` references, the way specs name heavy objects."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from typing import Any

from swiftcore.errors import SwiftcoreError

__all__ = ["is_reference", "lazy_exports", "resolve", "unresolved_references"]

_REF = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")


def is_reference(value: object) -> bool:
    """True when ``value`` is a well-formed ``"package.module:attr.sub"`` string."""
    return isinstance(value, str) and bool(_REF.match(value))


def resolve(reference: str, *, what: str = "object") -> Any:
    """Import ``module`` and return ``attr`` (dots walk attributes) for ``"module:attr"``.

    Args:
        reference: the ``"module:attr"`` string.
        what: how to name it in an error, e.g. ``"loader of model 'qwen3_5' (plugin qwen3_5)"``.

    Raises:
        SwiftcoreError: the string is malformed, the module cannot be imported or has no such attribute.
    """
    if not is_reference(reference):
        raise SwiftcoreError(f"{what}: {reference!r} is not a 'package.module:attribute' reference")
    module_name, _, attr_path = reference.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise SwiftcoreError(f"{what}: cannot import {module_name!r} for {reference!r}: {exc}") from exc
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise SwiftcoreError(f"{what}: {module_name!r} has no attribute {attr_path!r}") from exc
    return obj


def unresolved_references(specs: dict[str, list[Any]]) -> list[str]:
    """Every lazy ``"module:attr"`` field of ``specs`` (``{kind: [spec, ...]}``) that does not import.

    Used by ``swiftcore plugins --check`` and the plugin contract kit.

    Returns:
        One message per reference that fails, naming the spec kind, name and field.
    """
    problems = []
    for kind, items in specs.items():
        for spec in items:
            for ref_field in type(spec)._references:
                ref = getattr(spec, ref_field)
                if ref is None:
                    continue
                try:
                    resolve(ref, what=f"{kind} {spec.name!r} field {ref_field!r}")
                except SwiftcoreError as exc:
                    problems.append(str(exc))
    return problems


def lazy_exports(package: str, where: Mapping[str, str]) -> Callable[[str], Any]:
    """A package ``__getattr__`` serving its face (``__all__``) from submodules on first use, so importing the package
    stays light (no torch): ``__getattr__ = lazy_exports(__name__, {"SwiftTrainer": "trainer", ...})``."""

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{where[name]}"), name)

    return __getattr__
