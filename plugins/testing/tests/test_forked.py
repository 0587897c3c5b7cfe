"""``run_swiftcore``: a command forked from the fork server gives what the same command as a subprocess gives (exit
code, stdout, stderr), in the environment, folder and ``PYTHONPATH`` it is given, and fails as that one fails."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from swiftcore_testing import run_swiftcore, user_env

SWIFTCORE = str(Path(sys.executable).with_name("swiftcore"))

#: A third-party plugin in a folder of its own: found only through ``PYTHONPATH``.
PLUGIN = """
from swiftcore.api import RewardSpec, hookimpl

SWIFTCORE_API = "1.2"


@hookimpl
def swiftcore_register_rewards():
    return [RewardSpec(name="shout", function="acme_rewards:shout", description="1 for a capital letter")]


def shout(completions, **kwargs):
    return [1.0 if any(ch.isupper() for ch in c) else 0.0 for c in completions]
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("site")
    (root / "acme_rewards.py").write_text(PLUGIN)
    info = root / "acme_rewards-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-rewards\nVersion: 0.1.0\n")
    entry_points = "[swiftcore.plugins]\nacme = acme_rewards\n\n[swiftcore.rewards]\nshout = acme_rewards\n"
    (info / "entry_points.txt").write_text(entry_points)
    return root


def _both(*args: str, **kwargs) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    forked = run_swiftcore(*args, **kwargs)
    fresh = subprocess.run([SWIFTCORE, *args], capture_output=True, text=True, timeout=600, **kwargs)
    return forked, fresh


def test_a_forked_command_finds_a_plugin_on_its_pythonpath_as_a_fresh_process_does(site: Path, tmp_path: Path) -> None:
    env = user_env(PYTHONPATH=str(site))
    forked, fresh = _both("rewards", "--json", env=env, cwd=tmp_path)
    assert forked.returncode == fresh.returncode == 0, forked.stderr
    assert json.loads(forked.stdout) == json.loads(fresh.stdout)
    assert "shout" in {row["name"] for row in json.loads(forked.stdout)}
    # ... and the next command, without that PYTHONPATH, does not see it (nothing stays from one child to the next)
    alone = run_swiftcore("rewards", "--json", env=user_env(), cwd=tmp_path)
    assert "shout" not in {row["name"] for row in json.loads(alone.stdout)}


def test_a_refusal_gives_the_same_exit_code_and_message(tmp_path: Path) -> None:
    args = ("train", "--model", str(tmp_path / "missing"), "--dataset", str(tmp_path / "none.jsonl"))
    forked, fresh = _both(*args, env=user_env(), cwd=tmp_path)
    assert forked.returncode == fresh.returncode != 0
    assert forked.stderr == fresh.stderr and "Error:" in forked.stderr
    usage = run_swiftcore("train", "--no-such-option", env=user_env(), cwd=tmp_path)
    assert usage.returncode == 2 and "Usage: swiftcore train" in usage.stderr


def test_the_command_runs_in_the_folder_and_environment_it_is_given(site: Path) -> None:
    """A relative ``PYTHONPATH`` is read from ``cwd``; ``SWIFTCORE_PLUGINS`` (the plugin set) is the given one."""
    def rewards(**extra: str) -> set[str]:
        done = run_swiftcore("rewards", "--json", env=user_env(PYTHONPATH=".", **extra), cwd=site)
        assert done.returncode == 0, done.stderr
        return {row["name"] for row in json.loads(done.stdout)}

    assert "shout" in rewards()
    assert "shout" not in rewards(SWIFTCORE_PLUGINS="no:acme")


def test_a_command_past_its_timeout_is_killed(tmp_path: Path) -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        run_swiftcore("train", "--help", env=user_env(), cwd=tmp_path, timeout=0.001)


def test_a_forked_server_answers_stops_on_sigterm_and_dies_on_sigkill(tiny_model_dir, tmp_path: Path) -> None:
    """``deploy_process`` forks the server (this environment's swiftcore): it answers the openai client, and the
    signals a test sends reach the server itself."""
    import signal

    import httpx
    from swiftcore_testing import deploy_process
    from swiftcore_testing.forked import ForkedProcess, start_swiftcore

    model = tiny_model_dir("qwen3_5")
    with deploy_process("--model", str(model), "--no-api-key", env=user_env(OMP_NUM_THREADS="1")) as (url, proc):
        assert isinstance(proc, ForkedProcess) and proc.poll() is None
        asked = {"model": "tuned", "prompt": "Hi", "max_tokens": 2}
        reply = httpx.post(f"{url}/v1/completions", json=asked, timeout=60)
        assert reply.status_code == 200 and reply.json()["choices"][0]["text"] is not None
    assert proc.returncode is not None  # stopped by the SIGTERM on the way out

    killed = start_swiftcore("deploy", "--model", str(model), "--no-api-key", env=user_env(), cwd=tmp_path)
    try:
        killed.send_signal(signal.SIGKILL)
        assert killed.wait(60) == -signal.SIGKILL
    finally:
        killed.close()
