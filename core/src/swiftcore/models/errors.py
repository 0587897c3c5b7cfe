"""Errors of model resolution and requirement checks."""

from __future__ import annotations

from swiftcore.errors import SwiftcoreError

__all__ = [
    "AmbiguousModelError",
    "MissingConfigError",
    "ModelResolutionError",
    "RequirementsError",
    "UnknownModelTypeError",
]


class ModelResolutionError(SwiftcoreError):
    """No single model spec could be picked for a checkpoint directory."""


class AmbiguousModelError(ModelResolutionError):
    """Several installed plugins claim the checkpoint; the message lists them and how to pick one."""


class UnknownModelTypeError(ModelResolutionError):
    """No installed plugin claims the checkpoint's model type; the message names the plugin to install."""


class MissingConfigError(ModelResolutionError):
    """The checkpoint directory (or its ``config.json``) does not exist or cannot be read."""


class RequirementsError(SwiftcoreError):
    """A model spec's ``requires`` are not met; the message gives the pip command."""
