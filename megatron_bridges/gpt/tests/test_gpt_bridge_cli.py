"""``swiftcore export`` end to end with the GPT bridge installed (real CLI processes)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import torch
from safetensors.torch import load_file
from swiftcore_testing import run_swiftcore


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return run_swiftcore("export", *args, timeout=300)


def test_export_to_mcore_and_back_via_cli(tiny, tmp_path: Path) -> None:
    hf = tiny("qwen3_moe")
    done = _run("--model", str(hf), "--to-mcore", str(tmp_path / "mcore"), "--tp", "2", "--ep", "2")
    assert done.returncode == 0, done.stderr
    assert "bridge: gpt_moe" in done.stdout
    assert (tmp_path / "mcore" / "latest_checkpointed_iteration.txt").read_text() == "release"
    assert len(list((tmp_path / "mcore" / "release").glob("mp_rank_*/model_optim_rng.pt"))) == 4
    done = _run("--model", str(tmp_path / "mcore"), "--to-hf", str(tmp_path / "back"))
    assert done.returncode == 0, done.stderr
    before, after = load_file(hf / "model.safetensors"), load_file(tmp_path / "back" / "model.safetensors")
    assert sorted(before) == sorted(after) and all(torch.equal(after[k], v) for k, v in before.items())


def test_export_check_parity_prints_the_comparison(tiny, tmp_path: Path) -> None:
    done = _run("--model", str(tiny("llama")), "--to-mcore", str(tmp_path / "mcore"), "--check-parity")
    assert done.returncode == 0, done.stderr
    assert "logit parity OK: max abs diff" in done.stdout and "argmax agreement 100.00%" in done.stdout


def test_unknown_model_type_names_installed_bridges(tiny, tmp_path: Path) -> None:
    hf = tmp_path / "hf"
    shutil.copytree(tiny("qwen3"), hf)
    config = json.loads((hf / "config.json").read_text())
    # A model type no bridge in this repository claims (gemma4 now has its own bridge distribution).
    (hf / "config.json").write_text(json.dumps({**config, "model_type": "mistral"}))
    done = _run("--model", str(hf), "--to-mcore", str(tmp_path / "mcore"))
    assert done.returncode == 2
    assert "no installed Megatron bridge converts model_type 'mistral'" in done.stderr
    assert "gpt (qwen3, llama" in done.stderr and "swiftcore plugins" in done.stderr
    assert "pip install" not in done.stderr
    assert not (tmp_path / "mcore").exists()


def test_bad_tp_via_cli_is_a_clear_error_with_no_output(tiny, tmp_path: Path) -> None:
    done = _run("--model", str(tiny("qwen3")), "--to-mcore", str(tmp_path / "mcore"), "--tp", "3")
    assert done.returncode == 2
    assert "--tp 3 does not divide config.json num_attention_heads=4" in done.stderr
    assert "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []
