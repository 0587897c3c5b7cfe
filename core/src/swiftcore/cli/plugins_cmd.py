"""``swiftcore plugins``: what is installed, from metadata alone; ``--check`` validates each plugin."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import click

from swiftcore.cli.main import CliState, pass_state, plugin_option

__all__ = ["plugins"]

# `--check` given without a plugin name: check every listed plugin.
_ALL = ":all:"


def _rows(state: CliState, plugin_specs: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    from swiftcore._plugins import BUILTIN_PLUGIN, _resolve_spec, discover, requested_from_env, required_plugins

    specs = [*(requested_from_env() or []), *state.plugin_specs, *plugin_specs]
    blocked = {s[3:] for s in specs if s.startswith("no:")}
    wanted = [s for s in specs if not s.startswith("no:")]
    shown: set[str] | None = None
    if wanted:  # --plugin X lists X and the plugins its distribution requires, from metadata alone
        discovered = discover()
        shown = set()
        for spec in wanted:
            for info in _resolve_spec(spec, discovered):
                shown |= {info.name, *(i.name for i in required_plugins(info, discovered))}
    from swiftcore import __version__

    rows = [
        {
            "name": BUILTIN_PLUGIN,
            "module": "swiftcore.builtin",
            "distribution": "swiftcore",
            "version": __version__,
            "source": "builtin",
            "provides": _builtin_provides(),
            "status": "builtin",
            "error": None,
            "api": None,
        }
    ]
    for name, info in discover().items():
        if shown is not None and name not in shown:
            continue
        if name in blocked:
            info.status = "blocked"
        rows.append(info.as_dict())
    return rows


def _builtin_provides() -> dict[str, list[str]]:
    # The built-ins are swiftcore's own light module, so asking their hooks costs no heavy import.
    from swiftcore._plugins import ENV_PLUGINS, load_plugins
    from swiftcore.specs import SPEC_KINDS

    registry = load_plugins(env={ENV_PLUGINS: ""}).registry
    provides = {kind: registry.names(kind) for kind in SPEC_KINDS}
    return {kind: names for kind, names in provides.items() if names}


def _check_all(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    names = [row["name"] for row in rows if row["source"] != "builtin" and row["status"] != "blocked"]
    done: dict[str, dict[str, Any]] = {}
    remaining = names
    # One fresh process checks them all (swiftcore._check defers those it cannot check cleanly there, and
    # each further process checks at least its first plugin); a crash leaves one process per plugin.
    while remaining:
        found = _run_check(remaining)
        checked = [n for n in remaining if n in found and not found[n].get("deferred")]
        if not checked:
            for name in remaining:
                done[name] = _run_check([name]).get(name) or _crashed(name, "")
            break
        done.update({n: found[n] for n in checked})
        remaining = [n for n in remaining if n not in done]
    reports = [done[n] for n in names]
    # Conflicts: the same (kind, name) provided by two plugins.
    owners: dict[tuple[str, str], list[str]] = {}
    for report in reports:
        for kind, names in report.get("provides", {}).items():
            for n in names:
                owners.setdefault((kind, n), []).append(report["plugin"])
    for (kind, n), plugin_names in sorted(owners.items()):
        if len(plugin_names) > 1:
            for report in reports:
                if report["plugin"] in plugin_names:
                    report["ok"] = False
                    report["problems"].append(
                        f"conflict: {kind} {n!r} is also provided by "
                        f"{', '.join(p for p in plugin_names if p != report['plugin'])}; users must pick "
                        f"with '{n}@PLUGIN'"
                    )
    return reports


def _run_check(names: list[str]) -> dict[str, dict[str, Any]]:
    """Run ``python -m swiftcore._check NAMES`` in a fresh process: plugin -> report (those it printed)."""
    env = dict(os.environ)
    env.pop("SWIFTCORE_PLUGINS", None)
    env["PYTHONSAFEPATH"] = "1"  # `-m` would put the cwd on sys.path: a folder `tiny/` there shadows plugin `tiny`
    proc = subprocess.run([sys.executable, "-m", "swiftcore._check", *names], capture_output=True, text=True, env=env)
    found: dict[str, dict[str, Any]] = {}
    for line in proc.stdout.splitlines():
        try:
            report = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(report, dict) and report.get("plugin") in names:
            found[report["plugin"]] = report
    if len(names) == 1 and names[0] not in found:
        found[names[0]] = _crashed(names[0], proc.stderr)
    return found


def _crashed(name: str, stderr: str) -> dict[str, Any]:
    return {"plugin": name, "ok": False, "problems": [f"check crashed: {stderr.strip()[-2000:]}"]}


@click.command("plugins")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option(
    "--check",
    "check",
    is_flag=False,
    flag_value=_ALL,
    default=None,
    metavar="[NAME]",
    help="Import the plugins in a fresh process and validate them (API version, specs, lazy references, "
    "no torch/transformers/megatron at import, conflicts); '--check NAME' checks only that plugin, like "
    "'--plugin NAME --check'. Exits 1 when any check fails.",
)
@plugin_option
@pass_state
def plugins(state: CliState, as_json: bool, check: str | None, plugin_specs: tuple[str, ...]) -> None:
    """List installed plugins: name, distribution, version, what each provides, status.

    Reads installed metadata only: no plugin code runs unless --check is given. With --plugin (or
    --check NAME), only the named plugins (and those their distributions require) are listed and checked.
    """
    if check is not None and check != _ALL:
        plugin_specs = (*plugin_specs, check)
    rows = _rows(state, plugin_specs)
    reports = _check_all(rows) if check is not None else []
    if as_json:
        out: dict[str, Any] = {"plugins": rows}
        if check is not None:
            out["check"] = reports
        click.echo(json.dumps(out, indent=2))
    else:
        _print_table(rows)
        for report in reports:
            mark = "ok" if report["ok"] else "FAILED"
            extra = f" ({report['import_seconds']:.3f}s import)" if "import_seconds" in report else ""
            click.echo(f"check {report['plugin']}: {mark}{extra}")
            for problem in report["problems"]:
                click.echo(f"  - {problem}")
    if check is not None and not all(r["ok"] for r in reports):
        raise click.exceptions.Exit(1)


def _print_table(rows: list[dict[str, Any]]) -> None:
    header = ("name", "distribution", "version", "status", "provides")
    lines = [header]
    for row in rows:
        provides = "; ".join(f"{k}: {', '.join(v)}" for k, v in row["provides"].items()) or "-"
        lines.append(
            (row["name"], row["distribution"] or row["module"], row["version"] or "-", row["status"], provides)
        )
    widths = [max(len(str(line[i])) for line in lines) for i in range(4)]
    for line in lines:
        click.echo("  ".join(str(cell).ljust(widths[i]) for i, cell in enumerate(line[:4])) + "  " + str(line[4]))
