"""``pip install ./core`` alone, in a fresh venv, gives a working CLI; plugins installed next to it add theirs.

The core alone has no torch and no transformers: ``swiftcore plugins``, ``template list`` and ``recipes`` work,
and a command that needs a plugin or the training stack says what to install instead of a traceback.
Installing the inference and server plugins adds ``infer`` and ``deploy``, the training plugin the ``sft``
recipe, the scaffold plugin ``new-plugin`` (its templates shipped in the wheel); a template plugin adds its
templates. The venv is new (no system site packages), so nothing of the repository's ``.venv`` leaks in.
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
    assert plugins[0]["provides"] == {"template": ["jinja"]}
    templates = _run(str(fresh / "swiftcore"), "template", "list", cwd=tmp_path)
    assert templates.returncode == 0 and templates.stdout.split()[0] == "jinja", templates.stderr
    recipes = _run(str(fresh / "swiftcore"), "recipes", "--json", cwd=tmp_path)
    assert recipes.returncode == 0 and json.loads(recipes.stdout) == [], recipes.stderr  # sft is swiftcore-train's
    rewards = _run(str(fresh / "swiftcore"), "rewards", cwd=tmp_path)  # the built-in rewards are swiftcore-train's
    assert rewards.returncode == 0 and rewards.stdout.startswith("no rewards:"), rewards.stderr


def test_core_alone_names_what_to_install_for_the_plugin_commands(fresh: Path, tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "qwen3"}')
    (tmp_path / "q.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    for command, dist in (
        ("infer", "swiftcore-infer"),
        ("deploy", "swiftcore-serve"),
        ("make-tiny", "swiftcore-tiny"),
        ("demo", "swiftcore-tiny"),
        ("new-plugin", "swiftcore-scaffold"),
    ):
        proc = _run(str(fresh / "swiftcore"), command, "--model", str(model), cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        assert f"'swiftcore {command}' is the {dist} plugin's command" in proc.stderr
        assert f"pip install {dist}" in proc.stderr and "Traceback" not in proc.stderr
    demo = _run(str(fresh / "python"), "-m", "swiftcore.demo", cwd=tmp_path)  # make demo's command, core alone
    assert demo.returncode == 2 and "pip install swiftcore-tiny" in demo.stderr, demo.stderr
    assert "Traceback" not in demo.stderr
    proc = _run(str(fresh / "swiftcore"), "export", "--model", str(model), "--to-mcore", "mcore", cwd=tmp_path)
    assert proc.returncode == 2 and "swiftcore-megatron" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "mcore").exists()
    proc = _run(str(fresh / "swiftcore"), "export", "--model", str(model), "--merge-lora", "merged", cwd=tmp_path)
    assert proc.returncode == 2 and "pip install swiftcore-infer" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "merged").exists()
    proc = _run(
        str(fresh / "swiftcore"), "train", "--model", str(model), "--dataset", "q.jsonl", "--output-dir", "run",
        cwd=tmp_path,
    )
    assert proc.returncode == 2 and "pip install swiftcore-train" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "run").exists()


def test_the_inference_and_server_plugins_add_infer_and_deploy(fresh: Path, tmp_path: Path) -> None:
    for name in ("infer", "serve"):
        source = tmp_path / name
        shutil.copytree(ROOT / "plugins" / name, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "tests"))
        # --no-deps: the core's [train]/[serve] extras (torch, fastapi, ...) stay out; the commands still load.
        proc = _run(str(fresh / "pip"), "install", "-q", "--no-deps", str(source))
        assert proc.returncode == 0, proc.stderr[-3000:]
    listed = _run(str(fresh / "swiftcore"), "--help", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    plugin_commands = listed.stdout.partition("Plugin commands:")[2].split()
    assert "infer" in plugin_commands and "deploy" in plugin_commands, listed.stdout
    helped = _run(str(fresh / "swiftcore"), "deploy", "--help", cwd=tmp_path)
    assert helped.returncode == 0 and "--model" in helped.stdout, helped.stderr
    # The inference plugin runs and names the missing stack: its backend's probe, not a traceback.
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "qwen3"}')
    (tmp_path / "q.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    proc = _run(
        str(fresh / "swiftcore"),
        "infer",
        "--model",
        str(model),
        "--input",
        "q.jsonl",
        "--output",
        "a.jsonl",
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr
    assert "torch and transformers not installed: pip install 'swiftcore[train]'" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "a.jsonl").exists()
    for name in ("swiftcore-infer", "swiftcore-serve"):
        assert _run(str(fresh / "pip"), "uninstall", "-q", "-y", name).returncode == 0


def test_the_training_plugin_adds_the_sft_recipe(fresh: Path, tmp_path: Path) -> None:
    source = tmp_path / "train"
    shutil.copytree(ROOT / "plugins" / "train", source, ignore=shutil.ignore_patterns("build", "*.egg-info", "tests"))
    proc = _run(str(fresh / "pip"), "install", "-q", "--no-deps", str(source))  # torch etc. stay out
    assert proc.returncode == 0, proc.stderr[-3000:]
    recipes = _run(str(fresh / "swiftcore"), "recipes", "--json", cwd=tmp_path)
    assert recipes.returncode == 0, recipes.stderr
    assert [(r["name"], r["provider"].split(" ")[0]) for r in json.loads(recipes.stdout)] == [("sft", "train")]
    helped = _run(str(fresh / "swiftcore"), "train", "--help", cwd=tmp_path)
    assert helped.returncode == 0 and "--tuner" in helped.stdout, helped.stderr
    rewards = _run(str(fresh / "swiftcore"), "rewards", cwd=tmp_path)  # the built-in rewards need no torch
    assert rewards.returncode == 0 and rewards.stdout.startswith("accuracy "), rewards.stderr
    assert _run(str(fresh / "pip"), "uninstall", "-q", "-y", "swiftcore-train").returncode == 0


def test_the_scaffold_plugin_adds_new_plugin_with_its_templates(fresh: Path, tmp_path: Path) -> None:
    """A non-editable install (a built wheel) ships the templates: ``new-plugin`` renders every file it lists."""
    source = tmp_path / "scaffold"
    ignore = shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "tests")
    shutil.copytree(ROOT / "plugins" / "scaffold", source, ignore=ignore)
    proc = _run(str(fresh / "pip"), "install", "-q", "--no-deps", str(source))
    assert proc.returncode == 0, proc.stderr[-3000:]
    listed = _run(str(fresh / "swiftcore"), "--help", cwd=tmp_path)
    assert "new-plugin" in listed.stdout.partition("Plugin commands:")[2].split(), listed.stdout + listed.stderr
    for kind in ("model", "bridge"):  # bridge: a kind with a requires.txt and its own test_contract.py
        out = tmp_path / kind
        proc = _run(str(fresh / "swiftcore"), "new-plugin", "acme", "--dir", str(out), "--kind", kind, cwd=tmp_path)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        written = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
        listed_files = [line.strip() for line in proc.stdout.splitlines() if line.startswith("  ")]
        assert written and [w.split("/", 1)[1] for w in written] == sorted(listed_files), proc.stdout
    assert _run(str(fresh / "pip"), "uninstall", "-q", "-y", "swiftcore-scaffold").returncode == 0


def test_a_template_plugin_installed_next_to_the_core_adds_its_templates(fresh: Path, tmp_path: Path) -> None:
    source = tmp_path / "qwen"
    shutil.copytree(ROOT / "template_plugins" / "qwen", source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    proc = _run(str(fresh / "pip"), "install", "-q", "--no-deps", str(source))
    assert proc.returncode == 0, proc.stderr[-3000:]
    templates = _run(str(fresh / "swiftcore"), "template", "list", cwd=tmp_path)
    names = [line.split()[0] for line in templates.stdout.splitlines()]
    assert names == ["jinja", "qwen3", "qwen3_5", "qwen3_asr"], templates.stdout + templates.stderr
