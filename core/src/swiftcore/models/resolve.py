"""Pick the :class:`~swiftcore.specs.ModelSpec` for a checkpoint directory.

Resolution order (each step is logged on the ``swiftcore.models`` logger):

1. an explicit ``model_type``: a spec name, ``name@plugin``, or a Hugging Face ``model_type``;
2. ``swiftcore_args.json`` in the directory (key ``"model_type"``, written by training);
3. the ``swiftcore_resolve_model`` hook (first non-None answer);
4. ``config.json``'s ``model_type`` and ``architectures`` matched against what specs claim.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swiftcore.errors import ConflictError, UnknownNameError
from swiftcore.models.errors import AmbiguousModelError, MissingConfigError, ModelResolutionError, UnknownModelTypeError

if TYPE_CHECKING:
    from swiftcore.api.protocols import PluginSet

__all__ = ["ARGS_FILE", "read_args_file", "read_generation_defaults", "read_hf_config", "resolve_model_spec"]

logger = logging.getLogger("swiftcore.models")

#: Written by ``swiftcore train`` next to each checkpoint; ``{"model_type": "<spec name>", ...}``.
ARGS_FILE = "swiftcore_args.json"


def read_hf_config(model_dir: str | Path) -> dict[str, Any] | None:
    """Return the parsed ``config.json`` of ``model_dir``, or None when there is none.

    Raises:
        MissingConfigError: the file exists but is not a JSON object.
    """
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise MissingConfigError(f"{path}: cannot read it as JSON ({exc}); re-save the checkpoint") from exc
    if not isinstance(data, dict):
        raise MissingConfigError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def read_args_file(model_dir: str | Path) -> str | None:
    """Return the ``model_type`` recorded in ``model_dir/swiftcore_args.json``, or None.

    Raises:
        ModelResolutionError: the file exists but is not valid JSON or its ``model_type`` is not a string.
    """
    path = Path(model_dir) / ARGS_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelResolutionError(f"{path}: not valid JSON ({exc}); fix or delete it") from exc
    value = data.get("model_type") if isinstance(data, dict) else None
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ModelResolutionError(f"{path}: field 'model_type' must be a non-empty string, got {value!r}")
    return value


def read_generation_defaults(*dirs: str | Path | None) -> dict[str, Any]:
    """What a trained checkpoint asks inference to default to: the ``generation_defaults`` of the first
    ``swiftcore_args.json`` found in ``dirs`` (an adapter before its base), e.g.
    ``{"chat_template_kwargs": {"enable_thinking": false}}`` for a model trained on non-thinking replies.

    A file that cannot be read gives no defaults (resolution reports it where it matters).
    """
    for directory in dirs:
        if directory is None:
            continue
        path = Path(directory) / ARGS_FILE
        if not path.is_file():
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        defaults = data.get("generation_defaults") if isinstance(data, dict) else None
        return dict(defaults) if isinstance(defaults, dict) else {}
    return {}


def resolve_model_spec(model_dir: str | Path, plugins: PluginSet, model_type: str | None = None) -> Any:
    """Return the ModelSpec that loads the checkpoint in ``model_dir``.

    Args:
        model_dir: a local checkpoint directory.
        plugins: the loaded plugins (``swiftcore.load_plugins()``).
        model_type: an explicit choice (``--model-type``): a spec name, ``name@plugin``, or an HF
            ``model_type``; it wins over everything in the directory.

    Returns:
        The :class:`~swiftcore.specs.ModelSpec`, stamped with its provider.

    Raises:
        MissingConfigError: ``model_dir`` does not exist, or nothing else answered and it has no
            ``config.json``.
        AmbiguousModelError: several specs claim the checkpoint (the message lists them and their plugins).
        UnknownModelTypeError: no installed plugin claims it (the message names the plugin to install).
    """
    directory = Path(model_dir)
    if not directory.is_dir():
        raise MissingConfigError(f"model directory {str(directory)!r} does not exist (or is not a directory)")
    registry = plugins.registry
    specs = registry.all("model")

    if model_type:
        logger.info("resolve %s: explicit model type %r", directory, model_type)
        return _by_name_or_type(model_type, specs, registry, source="--model-type")

    recorded = read_args_file(directory)
    if recorded:
        logger.info("resolve %s: %s says model_type %r", directory, ARGS_FILE, recorded)
        return _by_name_or_type(recorded, specs, registry, source=str(directory / ARGS_FILE))
    logger.debug("resolve %s: no %s", directory, ARGS_FILE)

    hf_config = read_hf_config(directory)
    answer = plugins.pm.hook.swiftcore_resolve_model(
        model_dir=str(directory), hf_config=dict(hf_config or {}), candidates=list(specs)
    )
    if answer:
        logger.info("resolve %s: swiftcore_resolve_model hook answered %r", directory, answer)
        return _by_name(answer, registry, source="the swiftcore_resolve_model hook")
    logger.debug("resolve %s: no plugin's swiftcore_resolve_model hook answered", directory)

    if hf_config is None:
        raise MissingConfigError(
            f"{directory / 'config.json'} does not exist: is {str(directory)!r} a Hugging Face checkpoint "
            "directory? Point --model at the directory holding config.json, or pass --model-type"
        )
    spec = _by_hf_config(hf_config, specs, source=str(directory / "config.json"))
    logger.info("resolve %s: config.json matched model %r of %s", directory, spec.name, spec.provider)
    return spec


def _by_name(name: str, registry: Any, *, source: str) -> Any:
    """A spec by its registry name (``name`` or ``name@plugin``), with the source named on failure."""
    try:
        return registry.get("model", name)
    except ConflictError as exc:
        raise AmbiguousModelError(f"{source}: {exc}") from exc
    except UnknownNameError as exc:
        raise UnknownModelTypeError(f"{source}: {exc}") from exc


def _by_name_or_type(value: str, specs: list[Any], registry: Any, *, source: str) -> Any:
    """A spec name first (``name@plugin`` included); otherwise an HF ``model_type`` that specs claim."""
    base = value.partition("@")[0]
    if "@" in value or any(s.name == base for s in specs):
        return _by_name(value, registry, source=source)
    claiming = [s for s in specs if value in s.model_types]
    if len(claiming) == 1:
        logger.info(
            "resolve: HF model_type %r is claimed by model %r of %s", value, claiming[0].name, claiming[0].provider
        )
        return claiming[0]
    if claiming:
        raise AmbiguousModelError(_ambiguous(f"{source}: model type {value!r}", claiming))
    raise UnknownModelTypeError(_unknown(f"{source}: model type {value!r}", value, specs))


def _by_hf_config(hf_config: dict[str, Any], specs: list[Any], *, source: str) -> Any:
    """Match ``model_type`` (narrowed by ``architectures`` when several claim it), then ``architectures``."""
    hf_type = hf_config.get("model_type")
    architectures = [a for a in hf_config.get("architectures") or () if isinstance(a, str)]
    by_type = [s for s in specs if hf_type and hf_type in s.model_types]
    logger.debug("resolve: model_type %r claimed by %s", hf_type, [f"{s.name}@{s.provider.plugin}" for s in by_type])
    if len(by_type) > 1 and architectures:
        narrowed = [s for s in by_type if set(architectures) & set(s.architectures)]
        if narrowed:
            by_type = narrowed
    if len(by_type) == 1:
        return by_type[0]
    if by_type:
        raise AmbiguousModelError(_ambiguous(f"{source}: model_type {hf_type!r}", by_type))
    by_arch = [s for s in specs if set(architectures) & set(s.architectures)]
    logger.debug("resolve: architectures %r claimed by %s", architectures, [s.name for s in by_arch])
    if len(by_arch) == 1:
        return by_arch[0]
    if by_arch:
        raise AmbiguousModelError(_ambiguous(f"{source}: architectures {architectures!r}", by_arch))
    if not hf_type and not architectures:
        raise MissingConfigError(
            f"{source} has neither 'model_type' nor 'architectures'; pass --model-type to say which model it is"
        )
    described = f"model_type {hf_type!r}" if hf_type else f"architectures {architectures!r}"
    raise UnknownModelTypeError(_unknown(f"{source}: {described}", hf_type or architectures[0], specs))


def _ambiguous(subject: str, candidates: list[Any]) -> str:
    listing = "; ".join(f"{s.name!r} from {s.provider}" for s in candidates)
    first = candidates[0]
    return (
        f"{subject} is claimed by several models: {listing}. Pick one with --model-type NAME@PLUGIN "
        f"(e.g. --model-type {first.name}@{first.provider.plugin}), or block a plugin with --plugin no:NAME"
    )


def _unknown(subject: str, value: str, specs: list[Any]) -> str:
    import difflib

    known = sorted({t for s in specs for t in (s.name, *s.model_types)})
    close = difflib.get_close_matches(value, known, n=3, cutoff=0.6)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    installed = f" Installed models: {', '.join(sorted({s.name for s in specs}))}." if specs else ""
    return (
        f"{subject} is not claimed by any installed plugin.{hint}{installed} "
        "Install the plugin of its family (a distribution named like swiftcore-plugin-<family>; check the name "
        "and its publisher first), or pass --model-type NAME; `swiftcore plugins` lists what is installed."
    )
