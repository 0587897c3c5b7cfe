"""Look templates up in the registry and read the official chat templates plugins ship."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from swiftcore._lazy import resolve
from swiftcore.specs import TemplateSpec
from swiftcore.template.base import Template
from swiftcore.template.errors import TemplateError

if TYPE_CHECKING:
    from swiftcore.api.protocols import PluginSet

__all__ = ["get_template", "official_chat_template", "template_spec"]


def _registry(plugins: PluginSet | None) -> Any:
    if plugins is None:
        from swiftcore._plugins import load_plugins

        plugins = load_plugins()
    return getattr(plugins, "registry", plugins)


def template_spec(name: str, plugins: PluginSet | None = None) -> TemplateSpec:
    """The :class:`TemplateSpec` called ``name`` (``name@plugin`` picks a provider)."""
    return _registry(plugins).get("template", name)


def get_template(name: str, plugins: PluginSet | None = None, **kwargs: Any) -> Template:
    """Build the template called ``name``.

    Args:
        name: a template name (``qwen3_5``, ``jinja`` ...); ``name@plugin`` picks one provider.
        plugins: the loaded plugins (``swiftcore.load_plugins()``) or their registry; None loads all.
        **kwargs: passed to the template's factory (e.g. ``chat_template=`` for ``jinja``).

    Raises:
        UnknownNameError: no loaded plugin provides it. ConflictError: several do.
        TemplateError: the factory did not return a :class:`Template`.
    """
    spec = template_spec(name, plugins)
    factory = resolve(spec.factory, what=f"template {spec.name!r} of {spec.provider}")
    template = factory(**kwargs)
    if not isinstance(template, Template):
        raise TemplateError(
            f"template {spec.name!r} of {spec.provider}: factory {spec.factory!r} returned "
            f"{type(template).__name__}, not a swiftcore.template.Template"
        )
    template.name = spec.name
    template.spec = spec  # type: ignore[attr-defined]
    return template


def official_chat_template(spec_or_name: TemplateSpec | str, plugins: PluginSet | None = None) -> str | None:
    """The official Jinja chat template a template reproduces, read from its plugin's package data.

    Args:
        spec_or_name: a :class:`TemplateSpec` or a template name.
        plugins: the loaded plugins or registry (only needed for a name).

    Returns:
        The Jinja text, or None when the template has no official Jinja counterpart.
    """
    spec = spec_or_name if isinstance(spec_or_name, TemplateSpec) else template_spec(spec_or_name, plugins)
    return read_resource(spec.official) if spec.official and spec.official.endswith(".jinja") else None


def read_resource(reference: str) -> str:
    """Read ``"package:path/in/package"`` package data as text."""
    from importlib.resources import files

    package, sep, path = reference.partition(":")
    if not sep or not package or not path:
        raise TemplateError(f"{reference!r} is not a 'package:path/to/file' resource")
    try:
        return (files(package) / path).read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError) as exc:
        raise TemplateError(f"cannot read resource {reference!r}: {exc}; reinstall the plugin") from exc
