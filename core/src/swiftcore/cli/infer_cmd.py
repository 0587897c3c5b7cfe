"""``swiftcore infer``: Run a model on a JSONL file of conversations."""

from __future__ import annotations

import click

from swiftcore.errors import SwiftcoreError

__all__ = ["infer"]


@click.command("infer", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
def infer() -> None:
    """Run a model on a JSONL file of conversations. (Not available in this release yet.)"""
    raise SwiftcoreError("'swiftcore infer' is not available in this release yet; see the project's open issues.")
