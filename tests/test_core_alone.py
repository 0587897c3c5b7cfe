"""``pip install ./core`` alone, in a fresh venv, gives a working CLI; a template plugin installed next to it adds
its templates.

The core alone has no torch and no transformers: ``swiftcore plugins``, ``template list`` and ``recipes`` work,
and a command that needs the training or serving stack says what to install instead of a traceback. The venv
is new (no system site packages), so nothing of the repository's ``.venv`` leaks in.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd or "/tmp"), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    return subprocess.run(list(args), capture_output=True, text=True, cwd=cwd, env=env, timeout=600)


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new venv with ``pip install ./core`` (the pinned pluggy, click, packaging) and nothing else."""
    root = tmp_path_factory.mktemp("core-alone")
    venv.create(root / "venv", with_pip=True)
    bin_dir = root / "venv" / "bin"
    # Installed from a copy: a build leaves build/ next to the sources, and the checkout stays as it was.
    shutil.copytree(ROOT / "core", root / "core", ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    proc = _run(str(bin_dir / "pip"), "install", "-q", "-c", str(ROOT / "constraints.txt"), str(root / "core"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return bin_dir


def test_core_alone_lists_its_builtins_without_torch(fresh: Path, tmp_path: Path) -> None:
    missing = _run(str(fresh / "python"), "-c", "import importlib.util as u; print(u.find_spec('torch'))")
    assert missing.stdout.strip() == "None"
    listed = _run(str(fresh / "swiftcore"), "plugins", "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    plugins = json.loads(listed.stdout)["plugins"]
    assert [p["name"] for p in plugins] == ["swiftcore"]
    assert plugins[0]["provides"] == {"template": ["jinja"], "backend": ["transformers"], "recipe": ["sft"]}
    templates = _run(str(fresh / "swiftcore"), "template", "list", cwd=tmp_path)
    assert templates.returncode == 0 and templates.stdout.split()[0] == "jinja", templates.stderr
    recipes = _run(str(fresh / "swiftcore"), "recipes", cwd=tmp_path)
    assert recipes.returncode == 0 and recipes.stdout.startswith("sft "), recipes.stderr


def test_core_alone_names_what_to_install_for_the_heavy_commands(fresh: Path, tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "qwen3"}')
    (tmp_path / "q.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    proc = _run(
        str(fresh / "swiftcore"), "infer", "--model", str(model), "--input", "q.jsonl", "--output", "a.jsonl",
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert "torch and transformers not installed: pip install 'swiftcore[train]'" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "a.jsonl").exists()


def test_a_template_plugin_installed_next_to_the_core_adds_its_templates(fresh: Path, tmp_path: Path) -> None:
    source = tmp_path / "qwen"
    shutil.copytree(ROOT / "template_plugins" / "qwen", source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    proc = _run(str(fresh / "pip"), "install", "-q", "--no-deps", str(source))
    assert proc.returncode == 0, proc.stderr[-3000:]
    templates = _run(str(fresh / "swiftcore"), "template", "list", cwd=tmp_path)
    names = [line.split()[0] for line in templates.stdout.splitlines()]
    assert names == ["jinja", "qwen3", "qwen3_5", "qwen3_asr"], templates.stdout + templates.stderr
