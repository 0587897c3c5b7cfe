"""``swiftcore export``: Convert checkpoints (HF <-> Megatron-core, merge LoRA)."""

from __future__ import annotations

import click

from swiftcore.errors import SwiftcoreError

__all__ = ["export"]


@click.command("export", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
def export() -> None:
    """Convert checkpoints (HF <-> Megatron-core, merge LoRA). (Not available in this release yet.)"""
    raise SwiftcoreError("'swiftcore export' is not available in this release yet; see the project's open issues.")
