"""``swiftcore new-plugin``: the scaffolded distribution installs, passes its own contract tests, trains with
``swiftcore train --plugin acme``, serves with ``swiftcore infer``, and uninstalls leaving the core as before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from swiftcore.scaffold import KINDS, ScaffoldError, distribution_name, plugin_files, render_plugin

BIN = Path(sys.executable).parent
SWIFTCORE = str(BIN / "swiftcore")


def _run(*args: str, cwd: Path | None = None, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    # Megatron tests earlier in this process set MASTER_PORT to a port this process still holds; a child
    # inheriting it could not bind it, so children pick their own.
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT")}
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)


def _plugins_json() -> list[dict]:
    done = _run(SWIFTCORE, "plugins", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["plugins"]


def test_generated_files_name_the_plugin_and_a_compatible_swiftcore() -> None:
    from swiftcore import __version__
    from swiftcore.plugin_api import API_VERSION_STRING

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


#: What docs/writing-a-plugin.md ("Publishing") and the registry's install hints name each kind's distribution.
_DOCUMENTED_NAMES = {
    "model": ("swiftcore-plugin-acme-lm", "swiftcore_plugin_acme_lm"),
    "head": ("swiftcore-plugin-acme-lm", "swiftcore_plugin_acme_lm"),
    "template": ("swiftcore-template-acme-lm", "swiftcore_template_acme_lm"),
    "backend": ("swiftcore-backend-acme-lm", "swiftcore_backend_acme_lm"),
    "bridge": ("swiftcore-bridge-acme-lm", "swiftcore_bridge_acme_lm"),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_is_named_as_the_guide_says(kind: str, tmp_path: Path) -> None:
    from swiftcore.registry import _INSTALL_HINT

    dist, package = _DOCUMENTED_NAMES[kind]
    files = plugin_files("acme_lm", kind)
    pyproject = files["pyproject.toml"]
    assert f'name = "{dist}"' in pyproject
    assert f'acme_lm = "{package}.plugin"' in pyproject
    assert all(path.startswith((f"src/{package}/", "tests/")) or "/" not in path for path in files), sorted(files)
    assert f"src/{package}/plugin.py" in files and files["README.md"].startswith(f"# {dist}\n")
    assert distribution_name("acme_lm", kind) == dist
    assert render_plugin("acme_lm", tmp_path, kind) == tmp_path / dist
    # The naming pattern "not installed" hints give is this distribution's (heads: the one swiftcore-heads).
    if kind != "head":
        assert _INSTALL_HINT[kind].replace("<name>", "acme-lm") == dist
    guide = (Path(__file__).parents[1] / "docs" / "writing-a-plugin.md").read_text(encoding="utf-8")
    assert dist.replace("acme-lm", "<name>") in guide, f"docs/writing-a-plugin.md does not name {kind} distributions"


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_renders_valid_python(kind: str) -> None:
    for path, text in plugin_files("demo", kind).items():
        if path.endswith(".py"):
            compile(text, path, "exec")


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


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.slow
def test_scaffold_installs_passes_its_contract_trains_serves_and_uninstalls(tmp_path: Path) -> None:
    before = _plugins_json()
    done = _run(SWIFTCORE, "new-plugin", "acme", "--dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    dist = tmp_path / "swiftcore-plugin-acme"
    try:
        done = _run(sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps", "-e", str(dist))
        assert done.returncode == 0, done.stderr
        listed = {p["name"]: p for p in _plugins_json()}
        assert listed["acme"]["provides"] == {"model": ["acme"]}

        # The generated package's own tests: the full contract (make-tiny, load, template, LoRA, generate).
        done = _run(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(dist), cwd=dist)
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
        assert " passed" in done.stdout and "failed" not in done.stdout

        tiny = tmp_path / "tiny"
        done = _run(SWIFTCORE, "make-tiny", "acme", str(tiny), "--plugin", "acme")
        assert done.returncode == 0, done.stderr
        assert json.loads((tiny / "config.json").read_text())["model_type"] == "acme"
        data = _write_jsonl(tmp_path / "chat.jsonl", [
            {"messages": [{"role": "user", "content": f"Say {w}."}, {"role": "assistant", "content": w}]}
            for w in ("hello", "goodbye", "yes", "no")
        ])
        out = tmp_path / "out"
        # `--plugin acme` loads only acme; its default template lives in the template plugin it depends on.
        with_template = ("--plugin", "acme", "--plugin", "template_qwen")
        done = _run(SWIFTCORE, "train", *with_template, "--model", str(tiny), "--dataset", str(data),
                    "--output-dir", str(out), "--max-steps", "2", "--max-length", "64", "--no-plot")
        assert done.returncode == 0, done.stderr[-4000:]
        args = json.loads((out / "args.json").read_text())
        assert "acme" in json.dumps(args)
        checkpoints = sorted(out.glob("checkpoint-*"))
        assert checkpoints, list(out.iterdir())

        prompts = _write_jsonl(tmp_path / "prompts.jsonl", [{"messages": [{"role": "user", "content": "Say hello."}]}])
        answers = tmp_path / "answers.jsonl"
        done = _run(SWIFTCORE, "infer", *with_template, "--model", str(checkpoints[-1]), "--input", str(prompts),
                    "--output", str(answers), "--max-new-tokens", "4")
        assert done.returncode == 0, done.stderr[-4000:]
        row = json.loads(answers.read_text().splitlines()[0])
        assert "error" not in row or row["error"] is None, row
        assert row["usage"]["completion_tokens"] >= 1
    finally:
        _run(sys.executable, "-m", "pip", "uninstall", "-y", "-q", "swiftcore-plugin-acme")
    assert _plugins_json() == before


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(set(KINDS) - {"model"}))
def test_other_kinds_install_and_pass_their_own_tests(kind: str, tmp_path: Path) -> None:
    name = f"acme_{kind}"
    before = _plugins_json()
    dist = render_plugin(name, tmp_path, kind)
    try:
        done = _run(sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps", "-e", str(dist))
        assert done.returncode == 0, done.stderr
        provides = {p["name"]: p["provides"] for p in _plugins_json()}[name]
        assert provides == {kind: [name]}
        done = _run(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(dist), cwd=dist)
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
        assert " passed" in done.stdout and "failed" not in done.stdout
    finally:
        _run(sys.executable, "-m", "pip", "uninstall", "-y", "-q", dist.name)
    assert _plugins_json() == before


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
