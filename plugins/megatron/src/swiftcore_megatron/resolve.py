"""Find the bridge for a checkpoint: its ``config.json`` ``model_type`` against the installed bridges.

Nothing here imports torch or megatron; the bridge class is resolved only once it is chosen.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swiftcore_megatron.errors import BridgeError, BridgeNotFoundError, CheckpointError

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = ["find_bridge_spec", "make_bridge", "read_hf_config", "resolve_bridge"]


def read_hf_config(model_dir: str | Path) -> dict[str, Any]:
    """Parse ``model_dir/config.json``.

    Raises:
        CheckpointError: when the file is missing, is not JSON, or has no ``model_type``.
    """
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        raise CheckpointError(f"{path} not found: --model must be a Hugging Face save_pretrained directory")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path}: line {exc.lineno}: not valid JSON ({exc.msg})") from exc
    if not isinstance(config, dict) or not config.get("model_type"):
        raise CheckpointError(f"{path}: field 'model_type' is missing; cannot tell which bridge converts it")
    return config


def find_bridge_spec(model_type: str, plugins: PluginSet, name: str | None = None) -> Any:
    """The BridgeSpec converting ``model_type`` among the loaded plugins.

    Args:
        model_type: the checkpoint's HF ``model_type``.
        plugins: the loaded :class:`~swiftcore.api.plugins.Plugins`.
        name: a bridge name (``NAME`` or ``NAME@plugin``) that overrides the look-up.

    Raises:
        BridgeNotFoundError: no installed bridge claims ``model_type`` (names the installed bridges and
            says to install a bridge plugin for it; the core keeps no table of which distribution that is,
            and guessing a name to ``pip install`` from a typed model type would invite typosquatting).
        BridgeError: several bridges claim it and none was picked.
    """
    registry = plugins.registry
    if name:
        return registry.get("bridge", name)
    specs = registry.all("bridge")
    matching = [s for s in specs if model_type in s.model_types]
    if not matching:
        installed = ", ".join(f"{s.name} ({', '.join(s.model_types)}; {s.provider})" for s in specs) or "none"
        raise BridgeNotFoundError(
            f"no installed Megatron bridge converts model_type {model_type!r}. Installed bridges: {installed}. "
            f"Install a bridge plugin that converts {model_type!r} (`swiftcore plugins` lists what is installed)"
        )
    if len(matching) > 1:
        which = ", ".join(f"{s.name}@{s.provider.plugin}" for s in matching)
        raise BridgeError(f"several bridges convert model_type {model_type!r}: {which}; pick one with --bridge")
    return matching[0]


def make_bridge(spec: Any, hf_config: dict[str, Any]) -> Any:
    """Import the spec's bridge class (megatron-core stays unimported until the bridge builds a model).

    Raises:
        BridgeError: when the spec's requirements are not installed.
    """
    from importlib.metadata import PackageNotFoundError, version

    from packaging.requirements import Requirement

    from swiftcore.api import resolve

    for req in spec.requires:
        requirement = Requirement(req)
        try:
            have = version(requirement.name)
        except PackageNotFoundError:
            have = None
        if have is None or (requirement.specifier and have not in requirement.specifier):
            raise BridgeError(
                f"bridge {spec.name!r} ({spec.provider}) needs {req}, found {have or 'nothing'}; pip install '{req}'"
            )
    cls = resolve(spec.factory, what=f"bridge {spec.name!r} of {spec.provider}")
    return cls(hf_config)


def resolve_bridge(hf_config: dict[str, Any], plugins: PluginSet, name: str | None = None) -> tuple[Any, Any]:
    """The installed bridge for a parsed config.json, as ``swiftcore export`` picks it.

    Args:
        hf_config: the checkpoint's config.json (its ``model_type`` picks the bridge).
        plugins: the loaded plugin set.
        name: a bridge name that overrides the choice by model type (``--bridge``).

    Returns:
        ``(spec, bridge)``: the BridgeSpec and the bridge instance built for ``hf_config``.

    Raises:
        BridgeNotFoundError, BridgeError: see :func:`find_bridge_spec` and :func:`make_bridge`.
    """
    spec = find_bridge_spec(hf_config["model_type"], plugins, name)
    return spec, make_bridge(spec, hf_config)
