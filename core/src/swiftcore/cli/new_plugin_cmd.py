"""``swiftcore new-plugin``: Scaffold a new plugin distribution."""

from __future__ import annotations

import click

from swiftcore.errors import SwiftcoreError

__all__ = ["new_plugin"]


@click.command("new-plugin", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
def new_plugin() -> None:
    """Scaffold a new plugin distribution. (Not available in this release yet.)"""
    raise SwiftcoreError("'swiftcore new-plugin' is not available in this release yet; see the project's open issues.")
