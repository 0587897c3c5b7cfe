"""Check a spec's ``requires`` (PEP 508 strings) against the installed distributions."""

from __future__ import annotations

import shlex
from importlib import metadata
from typing import Any

from swiftcore.models.errors import RequirementsError

__all__ = ["check_requirements", "unmet_requirements"]


def unmet_requirements(requires: tuple[str, ...] | list[str]) -> list[str]:
    """Return ``"requirement (found: X)"`` for each requirement the environment does not satisfy.

    Args:
        requires: PEP 508 requirement strings, e.g. ``("transformers>=5.19",)``. Requirements whose
            environment marker does not apply here are ignored.
    """
    from packaging.requirements import Requirement

    unmet: list[str] = []
    for text in requires:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate():
            continue
        try:
            version = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            unmet.append(f"{text} (not installed)")
            continue
        # Pre-releases count: a dev build of transformers should satisfy ">=5.19".
        if req.specifier and not req.specifier.contains(version, prereleases=True):
            unmet.append(f"{text} (found {req.name} {version})")
    return unmet


def check_requirements(spec: Any) -> None:
    """Raise :class:`RequirementsError` listing ``spec.requires`` that are not met, with the pip command.

    Args:
        spec: a spec with ``requires`` (a :class:`~swiftcore.specs.ModelSpec`, bridge or backend).
    """
    requires = tuple(getattr(spec, "requires", ()) or ())
    unmet = unmet_requirements(requires)
    if not unmet:
        return
    provider = f" (plugin {spec.provider})" if getattr(spec, "provider", None) else ""
    bad = [item.split(" (", 1)[0] for item in unmet]
    raise RequirementsError(
        f"{spec.kind} {spec.name!r}{provider} needs {', '.join(unmet)}. "
        f"Install with: pip install {' '.join(shlex.quote(r) for r in bad)}"
    )
