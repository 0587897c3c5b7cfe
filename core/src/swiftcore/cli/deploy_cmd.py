"""``swiftcore deploy``: Serve a model behind an OpenAI-compatible API."""

from __future__ import annotations

import click

from swiftcore.errors import SwiftcoreError

__all__ = ["deploy"]


@click.command("deploy", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
def deploy() -> None:
    """Serve a model behind an OpenAI-compatible API. (Not available in this release yet.)"""
    raise SwiftcoreError("'swiftcore deploy' is not available in this release yet; see the project's open issues.")
