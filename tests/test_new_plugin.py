"""``swiftcore new-plugin`` (swiftcore-scaffold): the scaffolded distribution installs, passes its own contract tests,
trains with ``swiftcore train --plugin acme``, serves with ``swiftcore infer``, and uninstalls leaving the core as
before; each kind is named as the guide and the registry's install hints say.

What the generator writes and refuses, on its own, is ``plugins/scaffold/tests``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from swiftcore_scaffold import KINDS, distribution_name, plugin_files, render_plugin

# make test (CI) leaves this module to make test-all: every scaffold kind installed and tested; a scaffolded plugin's
# wheel passing its contract stays in make test (tests/test_user_paths_from_wheels.py, plugins/scaffold/tests)
# (docs/testing.md, "Two tiers").
pytestmark = pytest.mark.extended

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
