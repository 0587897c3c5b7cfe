"""``swiftcore template``: List, render and check chat templates."""

from __future__ import annotations

import click

from swiftcore.errors import SwiftcoreError

__all__ = ["template"]


@click.command("template", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
def template() -> None:
    """List, render and check chat templates. (Not available in this release yet.)"""
    raise SwiftcoreError("'swiftcore template' is not available in this release yet; see the project's open issues.")
