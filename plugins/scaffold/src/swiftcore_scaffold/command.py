"""``swiftcore new-plugin``: scaffold a new plugin distribution (from templates shipped in swiftcore-scaffold)."""

from __future__ import annotations

from pathlib import Path

import click

__all__ = ["new_plugin"]

_KINDS = ("model", "template", "head", "backend", "bridge")


@click.command("new-plugin")
@click.argument("name")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="Where to create the distribution's folder (swiftcore-plugin-NAME; templates swiftcore-template-NAME, "
    "backends swiftcore-backend-NAME, bridges swiftcore-bridge-NAME).",
)
@click.option("--kind", type=click.Choice(_KINDS), default="model", show_default=True, help="What the plugin provides.")
@click.option("--force", is_flag=True, help="Overwrite files in an existing, non-empty folder.")
def new_plugin(name: str, directory: Path, kind: str, force: bool) -> None:
    """Write a complete plugin distribution: pyproject with entry points, plugin module, tiny config
    factory, README and a contract test. It is named swiftcore-plugin-NAME (model, head),
    swiftcore-template-NAME, swiftcore-backend-NAME or swiftcore-bridge-NAME, after its kind.

    \b
    Example:
      swiftcore new-plugin acme --dir ./plugins
      pip install -e ./plugins/swiftcore-plugin-acme && pytest ./plugins/swiftcore-plugin-acme
    """
    from swiftcore_scaffold import plugin_files, render_plugin

    target = render_plugin(name, directory, kind, force=force)
    click.echo(f"wrote {target} ({kind} plugin {name!r}):")
    for relative in sorted(plugin_files(name, kind)):
        click.echo(f"  {relative}")
    click.echo(f"next: pip install -e {target} && pytest {target}")
