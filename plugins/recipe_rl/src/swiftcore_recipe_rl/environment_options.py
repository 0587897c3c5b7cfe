"""``--environment-option KEY=VALUE``: an environment's options bound to its factory, each value converted to the type
the factory's keyword parameter declares, and checked before any model is loaded (:func:`environment_factory`).

Importing this module imports neither torch nor TRL.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["environment_factory"]


def _option_types(annotation: Any, default: Any) -> tuple[type, ...]:
    """The types a factory keyword takes, from its annotation (``int``, ``int | None``, ``Optional[float]``) or,
    without a usable one, its default's type (a default of None: any string). Empty: any string."""
    import types
    import typing

    if isinstance(annotation, type) and annotation is not inspect.Parameter.empty:
        return (annotation,)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        if all(isinstance(a, type) for a in args):
            return tuple(args)
    if default is not inspect.Parameter.empty and default is not None:
        return (type(default),)
    return ()


_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def _convert(value: str, kinds: tuple[type, ...]) -> Any:
    """``value`` (the string given) as the first of ``kinds`` it is; a ``ValueError`` if none."""
    if not kinds or str in kinds:
        return value
    text = value.strip()
    if type(None) in kinds and text.lower() in ("none", "null"):
        return None
    for kind in kinds:
        if kind is bool and text.lower() in _TRUE + _FALSE:
            return text.lower() in _TRUE
        if kind is int:
            try:
                return int(text)
            except ValueError:
                continue
        if kind is float:
            try:
                number = float(text)
            except ValueError:
                continue
            if math.isfinite(number):
                return number
        if kind not in (bool, int, float, type(None)):  # another class (a Path, an enum): built from the string
            try:
                return kind(text)
            except (TypeError, ValueError):
                continue
    raise ValueError(value)


def _type_names(kinds: tuple[type, ...]) -> str:
    names = {bool: "true or false", int: "a whole number", float: "a finite number", type(None): "none"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def environment_factory(
    factory: Callable[..., Any], options: Mapping[str, str], *, name: str = "?", provider: Any = None
) -> Callable[[], Any]:
    """The factory an episode loop calls, ``--environment-option KEY=VALUE`` bound to it as keyword arguments.

    The options an environment takes are its factory's keyword parameters (a class: its ``__init__``'s), and each
    value, given as a string, is converted to the type the parameter's annotation names (``int``, ``float``,
    ``bool``, ``str``, or a union of those and None; without one, its default's type; else it stays a string).
    A factory with ``**kwargs`` takes any key, its values as strings. With options, one environment is made here,
    so a value the factory itself refuses (``ValueError``/``TypeError``) fails before any model is loaded.

    Args:
        factory: the resolved ``EnvironmentSpec.factory``.
        options: key -> value, as :meth:`~swiftcore_recipe_rl.options.RolloutOptions.environment_options` gives.
        name: the environment's name, for messages.
        provider: its provider plugin, for messages.

    Raises:
        SwiftcoreError: a key the factory does not take (naming those it does), a value of the wrong type, or a value
            the factory refuses.
    """
    import functools

    from swiftcore.api import SwiftcoreError

    if not options:
        return factory
    who = f"environment {name!r}" + (f" ({provider})" if provider else "")
    try:
        try:
            signature = inspect.signature(factory, eval_str=True)
        except (NameError, TypeError, SyntaxError):  # an annotation that does not evaluate: go by the defaults
            signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a callable without a signature (a builtin): take the options as strings
        signature = None
    params = {} if signature is None else dict(signature.parameters)
    any_key = signature is None or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    takes = {
        key: p for key, p in params.items()
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }  # fmt: skip
    values: dict[str, Any] = {}
    for key, value in options.items():
        if key not in takes:
            if any_key:
                values[key] = value
                continue
            accepted = ", ".join(sorted(takes)) if takes else "no options"
            raise SwiftcoreError(
                f"--environment-option {key}={value}: {who} does not take {key!r}; it takes {accepted}"
                + ("" if takes else " (drop --environment-option)")
            )
        kinds = _option_types(takes[key].annotation, takes[key].default)
        try:
            values[key] = _convert(value, kinds)
        except ValueError:
            raise SwiftcoreError(
                f"--environment-option {key}={value}: {who} takes {key} as {_type_names(kinds)}, not {value!r}; "
                f"e.g. --environment-option {key}={_example(kinds)}"
            ) from None
    try:
        factory(**values)
    except (TypeError, ValueError) as exc:
        given = " ".join(f"{k}={v}" for k, v in options.items())
        raise SwiftcoreError(f"--environment-option {given}: {who} refused its options: {exc}") from None
    return functools.partial(factory, **values)


def _example(kinds: tuple[type, ...]) -> str:
    for kind, example in ((int, "2"), (float, "0.5"), (bool, "true")):
        if kind in kinds:
            return example
    return "VALUE"
