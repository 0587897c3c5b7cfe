"""``swiftcore recipes``: the training recipes the loaded plugins provide, with the options each adds."""

from __future__ import annotations

import json
from typing import Any

import click

from swiftcore.cli.main import CliState, pass_state, plugin_option

__all__ = ["recipes"]


@click.command("recipes")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@plugin_option
@pass_state
def recipes(state: CliState, as_json: bool, plugin_specs: tuple[str, ...]) -> None:
    """List training recipes (`swiftcore train --recipe NAME`) and the options each one adds.

    Loads the plugins (their modules, never torch) to ask them for their recipes and options.
    """
    from swiftcore.options import collect_options

    plugins = state.plugins(plugin_specs)
    specs = plugins.registry.all("recipe")
    options = collect_options(plugins, "train", {})
    rows: list[dict[str, Any]] = []
    for spec in specs:
        own = [o for o in options if spec.name in o.recipes]
        rows.append(
            {
                "name": spec.name,
                "provider": str(spec.provider),
                "tasks": list(spec.tasks),
                "description": spec.description,
                "options": [{"flags": list(o.flags), "help": str(o.kwargs.get("help", ""))} for o in own],
            }
        )
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no recipes: no loaded plugin provides one (`sft` comes with swiftcore-train)")
        return
    for row in rows:
        click.echo(f"{row['name']:<20} {row['provider']}")
        if row["description"]:
            click.echo(f"  {row['description']}")
        for option in row["options"]:
            click.echo(f"  {' / '.join(option['flags'])}: {option['help']}")
