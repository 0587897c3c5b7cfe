"""What a user installs is what works: every distribution's wheel, checked, and user paths run from wheels alone.

The dev venv holds all 40 distributions and every tool, so a dependency a distribution forgot to declare is
invisible to every other test (``swiftcore train`` once died on ``import matplotlib`` after a finished run in a
user's venv, and ``swiftcore deploy`` on FastAPI's "Form data requires python-multipart"). Here:

- every distribution's wheel is built from a clean copy of the tree (the files git tracks, nothing a build or a
  test left behind) and checked by ``twine check --strict`` (metadata, README) and ``check-wheel-contents``;
  every file git tracks under a distribution's ``src/`` is in its wheel (the official ``.jinja`` templates, the
  scaffold's templates, ``py.typed``);
- fresh venvs (no system site packages) hold only a user's subset, installed from that wheelhouse by name, their
  dependencies resolved from the wheels' own metadata, and run to the end with the outcome asserted.

uv creates and fills the venvs: it links packages from its cache, so torch is unpacked once per machine, not once
per venv (pip takes about a minute a venv here). The torch wheel comes from wherever pip's configuration finds
``torch==2.13.0`` (the CPU build on these machines), copied into the wheelhouse.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
GROUPS = ("core", "template_plugins/*", "model_plugins/*", "plugins/*", "megatron_bridges/*")
TORCH = "torch==2.13.0"


def _run(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: int = 900):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)


def _ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, f"{' '.join(map(str, proc.args))}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc


def _tracked_files() -> list[str]:
    return (
        _ok(_run("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=ROOT))
        .stdout.strip("\0")
        .split("\0")
    )


def _distribution_folders(root: Path) -> list[Path]:
    return [f for pattern in GROUPS for f in sorted(root.glob(pattern)) if (f / "pyproject.toml").is_file()]


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every distribution's wheel, built from a clean copy of the tracked tree, plus the torch wheel."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs the git checkout (the wheels are built from what a fresh clone holds)")
    base = tmp_path_factory.mktemp("wheels")
    tree, house = base / "tree", base / "wheelhouse"
    for name in _tracked_files():
        if (ROOT / name).is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, tree / name)
    folders = [f"./{f.relative_to(tree)}" for f in _distribution_folders(tree)]
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    _ok(_run(*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", house, *folders, cwd=tree))
    _ok(_run(*pip, "download", "-q", "--no-deps", "-d", house, TORCH))
    return house


def test_every_distribution_builds_a_wheel_that_passes_the_checks(wheelhouse: Path) -> None:
    folders = _distribution_folders(ROOT)
    wheels = sorted(wheelhouse.glob("swiftcore*.whl"))
    assert len(wheels) == len(folders), sorted(w.name for w in wheels)
    _ok(_run(BIN / "twine", "check", "--strict", *wheels))
    _ok(_run(BIN / "check-wheel-contents", *wheels))
    tracked = _tracked_files()
    for folder in folders:
        rel = folder.relative_to(ROOT).as_posix()
        name = _ok(_run(sys.executable, "-c", "import tomllib,sys; print(tomllib.load(open(sys.argv[1],'rb'))"
                        "['project']['name'])", folder / "pyproject.toml")).stdout.strip()  # fmt: skip
        wheel = next(w for w in wheels if w.name.startswith(name.replace("-", "_") + "-"))
        with zipfile.ZipFile(wheel) as archive:
            shipped = set(archive.namelist())
        sources = [t[len(rel) + 5 :] for t in tracked if t.startswith(f"{rel}/src/")]
        missing = [s for s in sources if s not in shipped]
        assert not missing, f"{wheel.name} lacks files its src/ tracks: {missing}"
        metadata = next(n for n in shipped if n.endswith(".dist-info/METADATA"))
        with zipfile.ZipFile(wheel) as archive:
            text = archive.read(metadata).decode()
        assert "Description-Content-Type: text/markdown" in text, f"{wheel.name}: no README in its metadata"


@pytest.fixture(scope="module")
def user_venv(wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """``user_venv("swiftcore-plugin-gemma4", "swiftcore-train")``: a fresh venv holding those and what they declare.

    Returns the venv's ``bin`` folder. Only the wheelhouse and the package index are searched; the repository's
    constraints pin the versions, as ``make install`` does.
    """
    uv = shutil.which("uv", path=str(BIN)) or shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed (make install installs it)")

    def make(*distributions: str) -> Path:
        root = tmp_path_factory.mktemp("venv")
        _ok(_run(uv, "venv", "-q", "--python", sys.executable, root))
        _ok(_run(
            uv, "pip", "install", "-q", "--python", root / "bin" / "python", "--find-links", wheelhouse,
            "-c", ROOT / "constraints.txt", *distributions,
        ))  # fmt: skip
        return root / "bin"

    return make


def _user_env(home: Path) -> dict[str, str]:
    """A user's shell: the venv first on PATH, no plugin set or rank a test exported, no model hub."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("SWIFTCORE_", "RANK", "WORLD_SIZE", "MASTER_"))}
    keep.pop("VIRTUAL_ENV", None)
    return {**keep, "HOME": str(home), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _chats(n: int) -> list[dict]:
    return [
        {"messages": [{"role": "user", "content": f"Is {i} even or odd?"},
                      {"role": "assistant", "content": "even" if i % 2 == 0 else "odd"}]}
        for i in range(n)
    ]  # fmt: skip


def test_gemma4_and_train_alone_train_lora_to_a_checkpoint_and_a_loss_plot(
    user_venv: Callable[..., Path], tiny_model_dir: Callable[[str], Path], tmp_path: Path
) -> None:
    """``pip install swiftcore-plugin-gemma4 swiftcore-train``: LoRA SFT ends with its checkpoint and loss.png."""
    bin_dir = user_venv("swiftcore-plugin-gemma4", "swiftcore-train")
    assert _run(bin_dir / "python", "-c", "import swiftcore_tiny").returncode != 0  # only what the user asked for
    data = _write_jsonl(tmp_path / "d.jsonl", _chats(16))
    proc = _ok(_run(
        bin_dir / "swiftcore", "train", "--plugin", "gemma4", "--model", tiny_model_dir("gemma4"), "--dataset", data,
        "--tuner", "lora", "--max-steps", "4", "--save-steps", "4", "--logging-steps", "1",
        "--output-dir", tmp_path / "out",
        cwd=tmp_path, env=_user_env(tmp_path),
    ))  # fmt: skip
    out = tmp_path / "out"
    assert (out / "checkpoint-4" / "adapter_model.safetensors").is_file(), proc.stderr[-2000:]
    assert (out / "loss.png").stat().st_size > 0
    losses = [json.loads(line)["loss"] for line in (out / "logs.jsonl").read_text().splitlines() if '"loss"' in line]
    assert losses and all(loss > 0 for loss in losses)


def test_qwen3_5_and_serve_alone_answer_a_chat_completion_through_the_openai_client(
    user_venv: Callable[..., Path], tiny_model_dir: Callable[[str], Path], tmp_path: Path
) -> None:
    """``pip install swiftcore-plugin-qwen3-5 swiftcore-serve``: ``swiftcore deploy`` starts and answers openai."""
    import openai
    from swiftcore_testing import deploy_process

    bin_dir = user_venv("swiftcore-plugin-qwen3-5", "swiftcore-serve")
    args = ("--model", str(tiny_model_dir("qwen3_5")), "--no-api-key")
    with deploy_process(*args, env=_user_env(tmp_path), python=str(bin_dir / "python")) as (base_url, _):
        client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="none")
        reply = client.chat.completions.create(
            model="tuned", messages=[{"role": "user", "content": "Is 3 even or odd?"}], max_tokens=4, temperature=0
        )
    assert reply.choices[0].finish_reason in ("stop", "length")
    assert reply.usage is not None and reply.usage.completion_tokens >= 1


def test_qwen3_5_and_the_preference_recipes_alone_train_dpo(
    user_venv: Callable[..., Path], tiny_model_dir: Callable[[str], Path], tmp_path: Path
) -> None:
    """``pip install swiftcore-plugin-qwen3-5 swiftcore-recipe-preference``: a DPO run ends with its adapter."""
    bin_dir = user_venv("swiftcore-plugin-qwen3-5", "swiftcore-recipe-preference")
    rows = [{"prompt": f"Is {i} even or odd?", "chosen": "even" if i % 2 == 0 else "odd",
             "rejected": "odd" if i % 2 == 0 else "even"} for i in range(6)]  # fmt: skip
    proc = _ok(_run(
        bin_dir / "swiftcore", "train", "--recipe", "dpo", "--model", tiny_model_dir("qwen3_5"),
        "--dataset", _write_jsonl(tmp_path / "prefs.jsonl", rows), "--tuner", "lora", "--max-steps", "2",
        "--batch-size", "3", "--logging-steps", "1", "--output-dir", tmp_path / "dpo",
        cwd=tmp_path, env=_user_env(tmp_path),
    ))  # fmt: skip
    assert "trained 2 steps" in proc.stdout + proc.stderr
    assert (tmp_path / "dpo" / "checkpoint-2" / "adapter_model.safetensors").is_file()
    logs = [json.loads(line) for line in (tmp_path / "dpo" / "logs.jsonl").read_text().splitlines()]
    assert any("rewards/margins" in r for r in logs)


def test_a_scaffolded_plugin_built_into_a_wheel_passes_its_contract_beside_the_core_alone(
    wheelhouse: Path, user_venv: Callable[..., Path], tmp_path: Path
) -> None:
    """``swiftcore new-plugin``'s distribution, as a wheel, beside the core alone: ``plugins --check`` and its tests."""
    done = _ok(_run(BIN / "swiftcore", "new-plugin", "acme", "--kind", "template", "--dir", tmp_path / "src"))
    source = tmp_path / "src" / "swiftcore-template-acme"
    assert source.is_dir(), done.stdout
    _ok(_run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", wheelhouse, source))
    bin_dir = user_venv("swiftcore-template-acme[test]")
    listing = "import importlib.metadata as m; print(' '.join(d.metadata['Name'] for d in m.distributions()))"
    names = _ok(_run(bin_dir / "python", "-c", listing)).stdout.split()
    assert "torch" not in names and "swiftcore-train" not in names, names  # the core alone, and the test-kit
    checked = _ok(_run(bin_dir / "swiftcore", "plugins", "--check", cwd=tmp_path, env=_user_env(tmp_path)))
    assert "acme" in checked.stdout, checked.stdout
    tests = _ok(_run(bin_dir / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests",
                     cwd=source, env=_user_env(tmp_path)))  # fmt: skip
    assert " passed" in tests.stdout and " failed" not in tests.stdout, tests.stdout[-2000:]
