"""Moved: media processing is the ``swiftcore-media`` distribution now (package ``swiftcore_media``)."""

from __future__ import annotations

from swiftcore._lazy import moved

__all__: list[str] = []

__getattr__ = moved(
    __name__,
    "media processing is the swiftcore-media distribution now; depend on swiftcore-media and import it from there",
    "swiftcore_media",
)
