"""Moved: media processing is the ``swiftcore-media`` distribution now (package ``swiftcore_media``).

Importing a name from here fails with that instruction, so a plugin written against plugin API 1.2 learns
where it went instead of getting an attribute error.
"""

from __future__ import annotations

from typing import Any

__all__: list[str] = []


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    raise ImportError(
        f"swiftcore.api.media.{name} moved to swiftcore_media.{name}: media processing is the swiftcore-media "
        "distribution now; depend on swiftcore-media and import it from there"
    )
