"""``swiftcore rewards``: the reward functions the loaded plugins provide (``--reward NAME`` of RL recipes)."""

from __future__ import annotations

import json
from typing import Any

import click

from swiftcore.cli.main import CliState, pass_state, plugin_option

__all__ = ["rewards"]


@click.command("rewards")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@plugin_option
@pass_state
def rewards(state: CliState, as_json: bool, plugin_specs: tuple[str, ...]) -> None:
    """List reward functions (`swiftcore train --recipe grpo --reward NAME`), the columns and options each takes.

    Loads the plugins (their modules, never torch) to ask them for their rewards; no reward function is imported.
    """
    plugins = state.plugins(plugin_specs)
    rows: list[dict[str, Any]] = [
        {
            "name": spec.name,
            "provider": str(spec.provider),
            "function": spec.function,
            "columns": list(spec.columns),
            "options": list(spec.options),
            "description": spec.description,
        }
        for spec in plugins.registry.all("reward")
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no rewards: no loaded plugin provides one (accuracy, format and length come with swiftcore-train)")
    for row in rows:
        click.echo(f"{row['name']:<20} {row['provider']}")
        if row["description"]:
            click.echo(f"  {row['description']}")
        if row["columns"]:
            click.echo(f"  reads column(s): {', '.join(row['columns'])}")
        if row["options"]:
            click.echo(f"  options (--reward-option {row['name']}.KEY=VALUE): {', '.join(row['options'])}")
