"""``swiftcore train``: Fine-tune a model (SFT, full or LoRA)."""

from __future__ import annotations

import click

from swiftcore.errors import SwiftcoreError

__all__ = ["train"]


@click.command("train", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
def train() -> None:
    """Fine-tune a model (SFT, full or LoRA). (Not available in this release yet.)"""
    raise SwiftcoreError("'swiftcore train' is not available in this release yet; see the project's open issues.")
