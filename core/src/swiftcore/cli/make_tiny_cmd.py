"""``swiftcore make-tiny``: Write a tiny random checkpoint of a model family."""

from __future__ import annotations

import click

from swiftcore.errors import SwiftcoreError

__all__ = ["make_tiny"]


@click.command("make-tiny", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
def make_tiny() -> None:
    """Write a tiny random checkpoint of a model family. (Not available in this release yet.)"""
    raise SwiftcoreError("'swiftcore make-tiny' is not available in this release yet; see the project's open issues.")
