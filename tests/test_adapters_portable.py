"""A LoRA adapter from `swiftcore train` works from any directory, and every adapter command names its base alike.

Issue 27: ``adapter_config.json`` stored the base as given (``--model tiny``), so ``infer`` and
``export --merge-lora`` failed from any other working directory, and the error suggested ``--adapter``,
which ``export`` did not have.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from swiftcore_testing import run_swiftcore


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWIFTCORE_")}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    return env


def _swiftcore(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return run_swiftcore(*args, cwd=cwd, env=_env(), timeout=600)


@pytest.fixture(scope="module")
def trained(tiny_model_dir, tmp_path_factory) -> tuple[Path, Path, Path]:
    """``(base, adapter checkpoint, prompts file)``: a LoRA run trained with a *relative* ``--model``."""
    base = tiny_model_dir("qwen3_5")
    root = tmp_path_factory.mktemp("portable")
    rows = [
        {"messages": [{"role": "user", "content": f"Say {w}."}, {"role": "assistant", "content": w}]}
        for w in ("alpha", "bravo", "charlie", "delta")
    ]
    (root / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "prompts.jsonl").write_text(json.dumps(rows[0]) + "\n")
    # The base is named relative to the training cwd, as a user would type it.
    workdir = base.parent
    proc = _swiftcore(
        "train",
        "--model",
        base.name,
        "--dataset",
        str(root / "data.jsonl"),
        "--output-dir",
        str(root / "run"),
        "--tuner",
        "lora",
        "--max-steps",
        "1",
        "--batch-size",
        "2",
        "--max-length",
        "64",
        "--no-plot",
        cwd=workdir,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return base, root / "run" / "checkpoint-1", root / "prompts.jsonl"


def test_adapter_config_stores_the_absolute_base(trained) -> None:
    base, checkpoint, _ = trained
    stored = json.loads((checkpoint / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert Path(stored).is_absolute(), stored
    assert Path(stored) == base.resolve()


def test_infer_and_merge_from_another_directory(trained, tmp_path) -> None:
    _, checkpoint, prompts = trained
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = _swiftcore(
        "infer",
        "--model",
        str(checkpoint),
        "--input",
        str(prompts),
        "--output",
        "answers.jsonl",
        "--max-new-tokens",
        "3",
        cwd=elsewhere,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    answer = json.loads((elsewhere / "answers.jsonl").read_text().splitlines()[0])
    assert "error" not in answer and "response" in answer

    proc = _swiftcore("export", "--model", str(checkpoint), "--merge-lora", "merged", cwd=elsewhere)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (elsewhere / "merged" / "config.json").is_file()
    assert not (elsewhere / "merged" / "adapter_config.json").exists()


def test_export_names_the_base_like_infer_and_deploy(trained, tmp_path) -> None:
    """An adapter whose stored base is gone: ``--model BASE --adapter DIR`` works for export as for infer."""
    base, checkpoint, _ = trained
    moved = tmp_path / "adapter"
    shutil.copytree(checkpoint, moved)
    config = json.loads((moved / "adapter_config.json").read_text())
    (moved / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": "/gone/base"}))

    proc = _swiftcore("export", "--model", str(moved), "--merge-lora", "merged", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "--model" in proc.stderr and "--adapter" in proc.stderr  # the advice names flags export has

    proc = _swiftcore("export", "--model", str(base), "--adapter", str(moved), "--merge-lora", "merged", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (tmp_path / "merged" / "config.json").is_file()


@pytest.mark.parametrize("command", ["infer", "deploy", "export"])
def test_every_adapter_command_takes_model_and_adapter(command: str) -> None:
    proc = run_swiftcore(command, "--help", env=_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "--model" in proc.stdout and "--adapter" in proc.stdout


def test_old_relative_base_still_resolves(trained, tmp_path, monkeypatch) -> None:
    """Adapters saved before the fix keep working: relative to the cwd, then to the adapter directory."""
    from swiftcore.models.adapters import base_model_dir

    base, checkpoint, _ = trained
    old = tmp_path / "old"
    shutil.copytree(checkpoint, old)
    config = json.loads((old / "adapter_config.json").read_text())
    (old / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": base.name}))
    monkeypatch.chdir(base.parent)
    assert base_model_dir(old) == base.resolve()
    relative_to_adapter = os.path.relpath(base, old)
    (old / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": relative_to_adapter}))
    monkeypatch.chdir(tmp_path)
    assert base_model_dir(old) == base.resolve()
