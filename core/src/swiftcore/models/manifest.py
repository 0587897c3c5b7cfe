"""The checkpoint manifest: what a checkpoint or adapter was trained as, recorded so inference can serve it alike.

``swiftcore train`` writes one record to the output directory (``args.json``) and into every checkpoint and
adapter it saves (``swiftcore_args.json``, the file name older checkpoints already carry). Besides the run's
config (``swiftcore_args``), ``model_type``, ``model_spec``, ``generation_defaults`` and ``versions``, the
record holds the manifest fields that :func:`build_manifest` makes::

    "manifest_version": 1,
    "family":   {"name": "qwen3_5", "provider": "qwen3_5 (swiftcore-qwen3_5 0.1.0)", "plugin": "qwen3_5",
                 "version": "0.1.0"},
    "template": {"name": "qwen3", "provider": ..., "plugin": "template_qwen", "version": "0.1.0"},
    "head":     null,               # or the head spec of a --task embedding / classification / ... run
    "task": "causal_lm", "tuner": "lora",
    "recipe":   {"name": "sft", "provider": "swiftcore", "plugin": "swiftcore", "version": "0.3.0"},
    "plugins":  [{"name": ..., "distribution": ..., "version": ...}, ...]

Each component is ``{name, provider, plugin, version}``: ``provider`` is the text ``str(Provider)`` gives,
``plugin`` and ``version`` the providing plugin's name and distribution version.

:func:`read_manifest` reads it back as a :class:`CheckpointManifest` from a checkpoint, an adapter or an output
directory; older records lacking fields give what can be derived from their other keys (``model_spec``, the
two-field ``template``, ``swiftcore_args``) and None for the rest. ``infer``, ``deploy`` and ``export`` use
:func:`manifest_template` (an adapter is served with the template it was trained with, not its base model's
default) and :func:`warn_mismatches` (a different ``--template``, or a plugin version other than the one the
checkpoint was trained with, is a warning on stderr, never an error).

Importing this module is cheap (no torch).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swiftcore.models.errors import ModelResolutionError

if TYPE_CHECKING:
    from swiftcore.api.protocols import PluginSet

__all__ = [
    "MANIFEST_VERSION",
    "CheckpointManifest",
    "Component",
    "build_manifest",
    "manifest_mismatches",
    "manifest_template",
    "read_manifest",
    "warn_mismatches",
]

logger = logging.getLogger("swiftcore.models")

#: Bumped when the meaning of a manifest field changes; records written before the manifest read as 0.
MANIFEST_VERSION = 1
#: The record's file in each checkpoint and adapter directory (see :data:`swiftcore.models.resolve.ARGS_FILE`).
CHECKPOINT_FILE = "swiftcore_args.json"
#: The record's file in a ``swiftcore train`` output directory.
RUN_FILE = "args.json"

# "plugin (distribution version)", as swiftcore.specs.Provider.__str__ writes it.
_PROVIDER_TEXT = re.compile(r"^(?P<plugin>[^ ]+)(?: \((?P<dist>[^ ]+) (?P<version>[^ )]+)\))?$")


@dataclass(frozen=True)
class Component:
    """One recorded spec (model family, template, head, recipe) and the plugin that provided it.

    Attributes:
        name: the spec's registry name.
        provider: its provider as text (``"template_qwen (swiftcore-template-qwen 0.1.0)"``), or None.
        plugin: the providing plugin's name, or None when unknown.
        version: the providing distribution's version, or None when unknown.
    """

    name: str
    provider: str | None = None
    plugin: str | None = None
    version: str | None = None

    @classmethod
    def of_spec(cls, spec: Any) -> Component:
        """The component of a registry spec (its ``provider`` stamped by the registry)."""
        provider = getattr(spec, "provider", None)
        return cls(
            name=spec.name,
            provider=str(provider) if provider is not None else None,
            plugin=getattr(provider, "plugin", None),
            version=getattr(provider, "version", None),
        )

    @classmethod
    def from_record(cls, value: Any) -> Component | None:
        """Parse a recorded ``{name, provider[, plugin, version]}``; plugin and version missing from an older
        record are read from its provider text. None for anything that is no such mapping."""
        if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not value["name"]:
            return None
        provider = value.get("provider") if isinstance(value.get("provider"), str) else None
        plugin = value.get("plugin") if isinstance(value.get("plugin"), str) else None
        version = value.get("version") if isinstance(value.get("version"), str) else None
        parsed = _PROVIDER_TEXT.match(provider or "")
        if parsed:
            plugin = plugin or parsed["plugin"]
            version = version or parsed["version"]
        return cls(name=value["name"], provider=provider, plugin=plugin, version=version)

    def to_dict(self) -> dict[str, str | None]:
        return {"name": self.name, "provider": self.provider, "plugin": self.plugin, "version": self.version}

    def describe(self) -> str:
        """``plugin version`` (or what of it is known), for messages."""
        return " ".join(p for p in (self.plugin or self.provider or "?", self.version) if p)


@dataclass(frozen=True)
class CheckpointManifest:
    """What a checkpoint or adapter records about how it was trained (see the module docstring).

    Attributes:
        path: the file it was read from.
        manifest_version: :data:`MANIFEST_VERSION` of the writer; 0 for a record written before the manifest
            (its fields are derived from the older keys where they can be).
        family: the model spec (name and provider plugin).
        template: the chat template, or None (head runs, or records without one).
        head: the head spec of a head-task run, else None.
        task: ``causal_lm`` or the head task; None when unknown.
        tuner: ``lora`` or ``full``; None when unknown.
        recipe: the training recipe; None when unknown.
        plugins: plugin name -> version, for every plugin loaded in the run.
        model_type: the recorded ``model_type`` (``name@plugin``).
        generation_defaults: what inference should default to (``chat_template_kwargs`` ...).
        record: the whole JSON record.
    """

    path: Path
    manifest_version: int = 0
    family: Component | None = None
    template: Component | None = None
    head: Component | None = None
    task: str | None = None
    tuner: str | None = None
    recipe: Component | None = None
    plugins: dict[str, str | None] = field(default_factory=dict)
    model_type: str | None = None
    generation_defaults: dict[str, Any] = field(default_factory=dict)
    record: dict[str, Any] = field(default_factory=dict, repr=False)


def build_manifest(
    cfg: Any, spec: Any, plugins: PluginSet, *, template: Any = None, head: Any = None
) -> dict[str, Any]:
    """The manifest fields of a training run's record (``swiftcore_train.run.start_run`` merges them in).

    Args:
        cfg: the run's :class:`~swiftcore_train.config.TrainConfig` (``task``, ``tuner``, ``recipe``).
        spec: the resolved model spec.
        plugins: the loaded plugins (their versions, and the registry to find the recipe and spec providers).
        template: the template spec, or a recorded ``{name, provider}`` (looked up for its version); None for
            runs without a chat template.
        head: the head spec, or a recorded ``{name, provider}`` (what the heads recipe passes); None for
            ``causal_lm`` runs.

    Returns:
        A JSON-ready dict: ``manifest_version``, ``family``, ``template``, ``head``, ``task``, ``tuner``,
        ``recipe``, ``plugins``.
    """
    registry = getattr(plugins, "registry", None)
    recipe_name = getattr(cfg, "recipe", None)
    recipe = _find(registry, "recipe", recipe_name) if recipe_name else None
    return {
        "manifest_version": MANIFEST_VERSION,
        "family": Component.of_spec(spec).to_dict(),
        "template": _component(template, registry, "template"),
        "head": _component(head, registry, "head"),
        "task": getattr(cfg, "task", None),
        "tuner": getattr(cfg, "tuner", None),
        "recipe": Component.of_spec(recipe).to_dict()
        if recipe is not None
        else (Component(recipe_name).to_dict() if recipe_name else None),
        "plugins": [{"name": i.name, "distribution": i.distribution, "version": i.version} for i in plugins.loaded()],
    }


def read_manifest(directory: str | Path | None) -> CheckpointManifest | None:
    """The manifest of a checkpoint or adapter directory (``swiftcore_args.json``) or of a ``swiftcore train`` output
    directory (``args.json``); None when the directory has neither (a checkpoint not trained by swiftcore).

    Fields an older record lacks are derived from its other keys, or left None.

    Raises:
        ModelResolutionError: the file exists but is not a JSON object.
    """
    if directory is None:
        return None
    directory = Path(directory)
    path = next((directory / n for n in (CHECKPOINT_FILE, RUN_FILE) if (directory / n).is_file()), None)
    if path is None:
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelResolutionError(f"{path}: not valid JSON ({exc}); fix or delete it") from exc
    if not isinstance(data, dict):
        raise ModelResolutionError(f"{path}: expected a JSON object, got {type(data).__name__}")
    args: dict[str, Any] = data["swiftcore_args"] if isinstance(data.get("swiftcore_args"), dict) else {}
    family = Component.from_record(data.get("family")) or Component.from_record(data.get("model_spec"))
    recipe = Component.from_record(data.get("recipe"))
    if recipe is None and isinstance(args.get("recipe"), str):
        recipe = Component(args["recipe"])
    plugins = {p["name"]: p.get("version") for p in data.get("plugins") or () if isinstance(p, dict) and p.get("name")}
    version = data.get("manifest_version")
    defaults = data.get("generation_defaults")
    return CheckpointManifest(
        path=path,
        manifest_version=version if isinstance(version, int) else 0,
        family=family,
        template=Component.from_record(data.get("template")),
        head=Component.from_record(data.get("head")),
        task=_text(data.get("task")) or _text(args.get("task")),
        tuner=_text(data.get("tuner")) or _text(args.get("tuner")),
        recipe=recipe,
        plugins=plugins,
        model_type=_text(data.get("model_type")),
        generation_defaults=dict(defaults) if isinstance(defaults, dict) else {},
        record=data,
    )


def manifest_template(manifest: CheckpointManifest | None, plugins: Any = None) -> str | None:
    """The template name to serve ``manifest``'s checkpoint with: the recorded one, as ``name@plugin`` when
    several installed plugins provide that name and the recorded plugin is one of them; None when the
    manifest records no template. ``plugins``: a plugin set, or its registry."""
    if manifest is None or manifest.template is None:
        return None
    name, plugin = manifest.template.name, manifest.template.plugin
    registry = getattr(plugins, "registry", plugins)
    if registry is not None and plugin:
        providers = registry.providers("template", name)
        if len(providers) > 1 and any(s.provider.plugin == plugin for s in providers):
            return f"{name}@{plugin}"
    return name


def manifest_mismatches(
    manifest: CheckpointManifest, plugins: PluginSet, *, spec: Any = None, template: str | None = None
) -> list[str]:
    """What differs between how ``manifest``'s checkpoint was trained and how it is about to be used.

    Args:
        manifest: the checkpoint's manifest.
        plugins: the loaded plugins (their registry gives the installed providers).
        spec: the model spec it is loaded with (default: the installed spec of the recorded family).
        template: the template the user asked for (``--template``), None when the manifest's is used.

    Returns:
        One sentence per difference (the user's ``--template`` against the recorded one; the family's,
        template's, head's or recipe's providing plugin or version against the installed one); [] when all
        match or nothing can be compared (unknown versions are not compared).
    """
    registry = getattr(plugins, "registry", plugins)
    where = f"(recorded in {manifest.path})"
    out: list[str] = []
    family = manifest.family
    if family is not None:
        if spec is not None and spec.name != family.name:
            out.append(f"the checkpoint was trained as model {family.name!r}, it is loaded as {spec.name!r} {where}")
        else:
            out += _provider_mismatch("model", family, spec or _find(registry, "model", family.name, family.plugin))
    recorded = manifest.template
    if template is not None and recorded is not None:
        if template.partition("@")[0] != recorded.name:
            out.append(
                f"--template {template} differs from template {recorded.name!r} the checkpoint was trained with "
                f"{where}; serving with {template} as asked (drop --template to use the trained one)"
            )
    elif recorded is not None:
        out += _provider_mismatch("template", recorded, _find(registry, "template", recorded.name, recorded.plugin))
    if manifest.head is not None:
        out += _provider_mismatch(
            "head", manifest.head, _find(registry, "head", manifest.head.name, manifest.head.plugin)
        )
    if manifest.recipe is not None and manifest.recipe.version:
        out += _provider_mismatch(
            "recipe", manifest.recipe, _find(registry, "recipe", manifest.recipe.name, manifest.recipe.plugin)
        )
    return [m if where in m else f"{m} {where}" for m in out]


def warn_mismatches(
    manifest: CheckpointManifest | None, plugins: PluginSet, *, spec: Any = None, template: str | None = None
) -> list[str]:
    """Log each of :func:`manifest_mismatches` as a warning (stderr under the CLI) and return them."""
    if manifest is None:
        return []
    messages = manifest_mismatches(manifest, plugins, spec=spec, template=template)
    for message in messages:
        logger.warning("checkpoint manifest: %s", message)
    return messages


def _provider_mismatch(kind: str, recorded: Component, installed: Any) -> list[str]:
    if installed is None:
        return [
            f"{kind} {recorded.name!r} was provided by {recorded.describe()} in training; no installed plugin "
            "provides it now"
        ]
    now = Component.of_spec(installed)
    if recorded.plugin and now.plugin and recorded.plugin != now.plugin:
        return [f"{kind} {recorded.name!r} was provided by {recorded.describe()} in training, now by {now.describe()}"]
    if recorded.version and now.version and recorded.version != now.version:
        return [
            f"{kind} {recorded.name!r} was trained with {recorded.plugin or 'its plugin'} {recorded.version}, "
            f"installed is {now.version}"
        ]
    return []


def _find(registry: Any, kind: str, name: str | None, plugin: str | None = None) -> Any:
    """The installed spec of ``kind`` called ``name`` (the recorded plugin's when it still provides it); None
    when none, or when several do and none is the recorded plugin's."""
    if registry is None or not name:
        return None
    providers = registry.providers(kind, name)
    picked = [s for s in providers if plugin and s.provider.plugin == plugin]
    if picked or len(providers) == 1:
        return (picked or providers)[0]
    return None


def _component(value: Any, registry: Any, kind: str) -> dict[str, str | None] | None:
    """A spec, or a recorded ``{name, provider}`` completed from the installed spec it names."""
    if value is None:
        return None
    if not isinstance(value, dict):
        return Component.of_spec(value).to_dict()
    recorded = Component.from_record(value)
    if recorded is None:
        return None
    spec = _find(registry, kind, recorded.name, recorded.plugin)
    if spec is not None and (recorded.provider is None or str(spec.provider) == recorded.provider):
        return Component.of_spec(spec).to_dict()
    return recorded.to_dict()


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
