"""Errors raised by the template engine."""

from __future__ import annotations

from swiftcore.errors import SwiftcoreError

__all__ = ["SampleTooLongError", "TemplateError"]


class TemplateError(SwiftcoreError, ValueError):
    """A record cannot be rendered or encoded by a template.

    The message names the template, the record (its ``id`` when it has one) and the message index,
    mirrors the official template's own error where there is one, and says what to change.
    """


class SampleTooLongError(TemplateError):
    """An encoded sample is longer than ``max_length`` and the truncation policy is ``error``."""
