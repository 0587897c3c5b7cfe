"""Moved: the data pipeline is the ``swiftcore-data`` distribution now (package ``swiftcore_data``)."""

from __future__ import annotations

from swiftcore._lazy import moved

__all__: list[str] = []

__getattr__ = moved(
    __name__,
    "the data pipeline is the swiftcore-data distribution now; depend on swiftcore-data and import it from there",
    "swiftcore_data",
)
