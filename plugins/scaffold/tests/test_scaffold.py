"""``swiftcore new-plugin``'s generator and command: what it writes, for every kind, and what it refuses.

Installing the generated distributions, running their own contract tests, training and serving with them are
cross-distribution tests: ``tests/test_new_plugin.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from fnmatch import fnmatch
from importlib import resources
from pathlib import Path

import pytest
import tomllib
from swiftcore_scaffold import KINDS, ScaffoldError, plugin_files, render_plugin

BIN = Path(sys.executable).parent
SWIFTCORE = str(BIN / "swiftcore")
DIST = Path(__file__).resolve().parents[1]


def _run(*args: str, cwd: Path | None = None, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    # Megatron tests earlier in this process set MASTER_PORT to a port this process still holds; a child
    # inheriting it could not bind it, so children pick their own.
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT")}
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)


def test_generated_files_name_the_plugin_and_a_compatible_swiftcore() -> None:
    from swiftcore import __version__
    from swiftcore.api import API_VERSION_STRING

    files = plugin_files("acme_lm", "model")
    pyproject = files["pyproject.toml"]
    major, minor = __version__.split(".")[:2]
    assert 'name = "swiftcore-plugin-acme-lm"' in pyproject
    assert f'"swiftcore>={major}.{minor},<{major}.{int(minor) + 1}"' in pyproject
    assert '[project.entry-points."swiftcore.plugins"]\nacme_lm = "swiftcore_plugin_acme_lm.plugin"' in pyproject
    assert '[project.entry-points."swiftcore.models"]\nacme_lm = "swiftcore_plugin_acme_lm.plugin"' in pyproject
    assert f'SWIFTCORE_API = "{API_VERSION_STRING}"' in files["src/swiftcore_plugin_acme_lm/plugin.py"]
    assert 'model_type = "acme_lm"' in files["src/swiftcore_plugin_acme_lm/modeling.py"]
    assert "class TestAcmeLmContract(PluginContract):" in files["tests/test_contract.py"]
    assert all("${" not in text for text in files.values())


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_renders_valid_python(kind: str) -> None:
    for path, text in plugin_files("demo", kind).items():
        if path.endswith(".py"):
            compile(text, path, "exec")


def test_the_templates_are_package_data() -> None:
    """Every template file beside the generator matches the distribution's package-data globs, so a non-editable
    install ships them (``tests/test_core_alone.py`` renders a plugin from one)."""
    globs = tomllib.loads((DIST / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-data"]
    root = resources.files("swiftcore_scaffold")
    data = [
        f"{folder.name}/{item.name}"
        for folder in root.iterdir()
        if folder.is_dir() and folder.name != "__pycache__"
        for item in folder.iterdir()
    ]
    assert {path.split("/")[0] for path in data} >= set(KINDS) | {"common"}
    assert [p for p in data if not any(fnmatch(p, g) for g in globs["swiftcore_scaffold"])] == []


_REGISTER_CHECK = """
import importlib.util, sys
from transformers import AutoConfig, PretrainedConfig

def modeling(name, path):
    spec = importlib.util.spec_from_file_location(f"swiftcore_plugin_{name}.modeling", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

def outcome(register):
    try:
        register()
    except ValueError as exc:
        return f"ValueError: {exc}"
    return "ok"

paths = dict(arg.split("=", 1) for arg in sys.argv[1:])
fresh = modeling("scaffold_fresh", paths["scaffold_fresh"])
print("fresh", outcome(fresh.register), outcome(fresh.register))  # registering the same classes twice is fine
print("builtin", outcome(modeling("qwen3", paths["qwen3"]).register))  # a transformers model type

class Other(PretrainedConfig):
    model_type = "scaffold_taken"

AutoConfig.register("scaffold_taken", Other)
print("taken", outcome(modeling("scaffold_taken", paths["scaffold_taken"]).register))  # another class holds it
"""


def test_model_scaffold_registration_tolerates_only_its_own_classes(tmp_path: Path) -> None:
    paths = []
    for name in ("scaffold_fresh", "qwen3", "scaffold_taken"):
        path = tmp_path / f"{name}_modeling.py"
        path.write_text(plugin_files(name, "model")[f"src/swiftcore_plugin_{name}/modeling.py"], encoding="utf-8")
        paths.append(f"{name}={path}")
    done = _run(sys.executable, "-c", _REGISTER_CHECK, *paths)
    assert done.returncode == 0, done.stderr[-4000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert lines["fresh"] == "ok ok"
    assert lines["builtin"].startswith("ValueError: ") and "qwen3" in lines["builtin"]
    assert lines["taken"].startswith("ValueError: model_type 'scaffold_taken' is already registered with")


def test_bad_name_kind_and_existing_target_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ScaffoldError, match="lower-case"):
        plugin_files("Acme-LM")
    with pytest.raises(ScaffoldError, match="--kind 'lora'"):
        plugin_files("acme", "lora")
    render_plugin("acme", tmp_path)
    with pytest.raises(ScaffoldError, match="exists and is not empty"):
        render_plugin("acme", tmp_path)


def test_cli_reports_a_bad_name_without_a_traceback(tmp_path: Path) -> None:
    done = _run(SWIFTCORE, "new-plugin", "Acme-LM", "--dir", str(tmp_path))
    assert done.returncode == 2
    assert "plugin name 'Acme-LM'" in done.stderr and "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_cli_writes_the_files_it_lists(tmp_path: Path) -> None:
    done = _run(SWIFTCORE, "new-plugin", "acme", "--dir", str(tmp_path), "--kind", "template")
    assert done.returncode == 0, done.stderr
    dist = tmp_path / "swiftcore-template-acme"
    written = sorted(str(p.relative_to(dist)) for p in dist.rglob("*") if p.is_file())
    assert written == sorted(plugin_files("acme", "template"))
    assert all(f"  {path}" in done.stdout for path in written)
