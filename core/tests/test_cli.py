"""The ``swiftcore`` console script, run as a user would (a subprocess), with real plugins installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from swiftcore import __version__

FIXTURES = Path(__file__).parent / "fixtures"


def test_version(run_cli) -> None:
    proc = run_cli("--version", with_plugins=False)
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"swiftcore {__version__} (plugin API 1.5)"


def test_help_lists_core_and_plugin_commands(run_cli) -> None:
    proc = run_cli("--help")
    assert proc.returncode == 0, proc.stderr
    for command in ("plugins", "train", "infer", "deploy", "export", "template", "make-tiny", "new-plugin"):
        assert f"  {command} " in proc.stdout
    # A plugin command's row carries its CommandSpec.short_help and the plugin it comes from.
    # (whitespace folded: click pads and wraps the rows to the longest command name, which the plugins installed set)
    text = " ".join(proc.stdout.split())
    assert "acme-hello Say hello. [plugin acme]" in text, proc.stdout
    assert "Serve a model behind an OpenAI-compatible API. [plugin serve]" in text, proc.stdout


def test_plugins_json_lists_every_installed_plugin(run_cli) -> None:
    proc = run_cli("plugins", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {row["name"]: row for row in json.loads(proc.stdout)["plugins"]}
    assert rows["acme"]["distribution"] == "swiftcore-plugin-acme"
    assert rows["acme"]["version"] == "0.3.1"
    assert rows["acme"]["provides"] == {"command": ["acme-hello"], "model": ["acme"], "template": ["acme-chat"]}
    assert rows["acme_broken"]["distribution"] == "acme-extras"
    assert rows["swiftcore"]["status"] == "builtin"
    # Listing imports no plugin code, so the broken plugin cannot complain.
    assert "exploded" not in proc.stderr


def test_plugins_table_marks_blocked(run_cli) -> None:
    proc = run_cli("--plugin", "no:acme_dup", "plugins")
    assert proc.returncode == 0, proc.stderr
    line = next(line for line in proc.stdout.splitlines() if line.startswith("acme_dup "))
    assert "blocked" in line


def test_plugins_check_fails_on_broken_plugins_and_reports_each(run_cli) -> None:
    proc = run_cli("plugins", "--check", "--json")
    assert proc.returncode == 1
    reports = {r["plugin"]: r for r in json.loads(proc.stdout)["check"]}
    assert not reports["acme_broken"]["ok"] and "exploded" in reports["acme_broken"]["problems"][0]
    assert not reports["acme_future"]["ok"] and "9.0" in reports["acme_future"]["problems"][0]
    assert any("conflict: model 'acme'" in p for p in reports["acme"]["problems"])
    assert any("core command" in p for p in reports["acme_clash"]["problems"])
    assert reports["acme"]["heavy_imports"] == []


def test_plugins_check_passes_on_a_clean_set(run_cli) -> None:
    # Block the misbehaving ones; acme alone is clean, its lazy references resolve, its index matches.
    blocks = [
        a for name in ("acme_broken", "acme_future", "acme_dup", "acme_clash") for a in ("--plugin", f"no:{name}")
    ]
    proc = run_cli(*blocks, "plugins", "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "check acme: ok" in proc.stdout


def test_plugins_check_name_checks_only_that_plugin(run_cli) -> None:
    # `--check NAME` is `--plugin NAME --check`: acme alone is clean (its duplicate is not checked).
    proc = run_cli("plugins", "--check", "acme", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [r["plugin"] for r in json.loads(proc.stdout)["check"]] == ["acme"]
    proc = run_cli("plugins", "--check", "acme_broken")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    checked = [line for line in proc.stdout.splitlines() if line.startswith("check ")]
    assert checked == ["check acme_broken: FAILED"], proc.stdout
    # A bare `--check` before another option still checks every plugin.
    proc = run_cli("plugins", "--check", "--json")
    assert {"acme", "acme_broken", "acme_future"} <= {r["plugin"] for r in json.loads(proc.stdout)["check"]}


def test_plugins_check_ignores_a_folder_named_like_a_plugin_in_the_cwd(run_cli, tmp_path) -> None:
    # `make-tiny FAMILY ./tiny`-style folders are common; the checking process must not import them as modules.
    (tmp_path / "acme").mkdir()
    proc = run_cli("plugins", "--check", "acme", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["check"][0]["ok"]


def test_python_m_next_to_a_folder_named_like_a_plugin_keeps_the_group_plugin_set(plugin_site, tmp_path) -> None:
    # Issue 53: `torchrun -m swiftcore.cli.main` beside `make-tiny ... ./tiny` failed with "--plugin 'tiny' is
    # ambiguous". `-m` puts the working directory on sys.path, where the folder imports as a namespace package (never a
    # plugin); and the module ran as __main__, a second copy whose CliState the commands' pass_state did not find, so
    # they loaded the plugins again from the exported SWIFTCORE_PLUGINS, dropping the group's --plugin.
    (tmp_path / "acme").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWIFTCORE_")}
    env["PYTHONPATH"] = os.pathsep.join([str(plugin_site), str(FIXTURES / "loose")])
    argv = [sys.executable, "-m", "swiftcore.cli.main", "--plugin", "acme", "template", "list"]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [line.split()[0] for line in proc.stdout.splitlines()] == ["acme-chat", "jinja"], proc.stdout  # not qwen3_5


def test_plugins_check_rechecks_in_a_fresh_process_after_a_heavy_import(tmp_path) -> None:
    # The plugins share one checking process; one that imports a heavy module (a stand-in `megatron`
    # here) is reported, and the plugins after it are checked again in a process of their own.
    from swiftcore.cli.plugins_cmd import _check_all

    heavy = tmp_path / "heavy_plugin.py"
    heavy.write_text('import sys, types\nsys.modules["megatron"] = types.ModuleType("megatron")\nSWIFTCORE_API = "1.0"')
    lights = [tmp_path / f"light_{i}.py" for i in (1, 2)]
    for light in lights:
        light.write_text(
            "from swiftcore.api import TemplateSpec, hookimpl\nSWIFTCORE_API = '1.0'\n\n@hookimpl\n"
            "def swiftcore_register_templates():\n"
            f"    return [TemplateSpec(name='{light.stem}', factory='swiftcore.api:hookimpl')]\n"
        )
    rows = [{"name": str(p), "source": "file", "status": "available"} for p in (heavy, *lights)]
    reports = _check_all(rows)
    assert [r["plugin"] for r in reports] == [str(heavy), *map(str, lights)]
    assert reports[0]["heavy_imports"] == ["megatron"] and not reports[0]["ok"]
    assert all(r["ok"] and r["heavy_imports"] == [] and "deferred" not in r for r in reports[1:]), reports
    # A reference that does not import is still found in the shared process.
    lights[0].write_text(lights[0].read_text().replace("factory='swiftcore.api:", "factory='light_gone:"))
    (bad,) = _check_all(rows[1:2])
    assert not bad["ok"] and "light_gone" in bad["problems"][0]


def test_plugin_command_runs_and_children_get_the_plugin_set(run_cli) -> None:
    proc = run_cli("--plugin", "acme", "acme-hello", "there")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "hello there from acme; SWIFTCORE_PLUGINS=acme"


def test_broken_autodiscovered_plugin_warns_but_cli_works(run_cli) -> None:
    proc = run_cli("acme-hello")
    assert proc.returncode == 0, proc.stderr
    assert "hello world from acme" in proc.stdout
    assert "skipped plugin 'acme_broken' (acme-extras 1.2.0)" in proc.stderr


def test_explicit_broken_plugin_exits_2_naming_it(run_cli) -> None:
    proc = run_cli("--plugin", "acme_broken", "acme-hello")
    assert proc.returncode == 2
    assert "plugin 'acme_broken' (acme-extras 1.2.0)" in proc.stderr
    assert "RuntimeError: acme_broken exploded on import" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_unknown_plugin_answers_with_close_matches(run_cli) -> None:
    proc = run_cli("--plugin", "acm", "acme-hello")
    assert proc.returncode == 2
    assert "Did you mean: acme" in proc.stderr
    assert "pip install swiftcore-plugin-acm" not in proc.stderr  # never an install command for a typo


def test_plugins_lists_only_the_plugins_asked_for(run_cli) -> None:
    proc = run_cli("plugins", "--plugin", "acme", "--json")
    assert proc.returncode == 0, proc.stderr
    names = [row["name"] for row in __import__("json").loads(proc.stdout)["plugins"]]
    assert "acme" in names and len(names) < len([r for r in __import__("json").loads(
        run_cli("plugins", "--json").stdout)["plugins"]]), names


def test_incompatible_api_is_refused_with_upgrade_hint(run_cli) -> None:
    proc = run_cli("--plugin", "acme_future", "acme-hello")
    assert proc.returncode == 2
    assert "targets plugin API 9.0" in proc.stderr and "Upgrade swiftcore" in proc.stderr


def test_core_command_cannot_be_replaced(run_cli) -> None:
    # acme_clash registers 'template'; the core's own template runs (its plugin loading reports the refusal).
    proc = run_cli("--plugin", "acme_clash", "--help")
    assert proc.stdout.count("  template ") == 1


def test_importing_the_cli_imports_no_heavy_module() -> None:
    code = (
        "import sys, swiftcore.cli.main, swiftcore._plugins, swiftcore.registry;"
        "print(','.join(m for m in ('torch', 'transformers', 'megatron') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == ""
