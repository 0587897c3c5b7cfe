"""The CLI in subprocesses: output collection, stopping, a root that cannot shadow modules, and a training run's
progress read from its files (``logs.jsonl``, ``checkpoint-N``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from swiftcore_webui import jobs
from swiftcore_webui.jobs import Job, last_checkpoint, progress_of, read_log


def test_output_keeps_lines_and_lets_carriage_returns_overwrite() -> None:
    job = Job(["--version"], cwd=".")
    assert job.wait(60) == 0
    assert job.output().startswith("swiftcore ")
    job._lines.clear()
    job._feed("first\n 10%|#   |\r 50%|##  |")
    assert job.output() == "first\n 50%|##  |"
    job._feed("\r100%|####|\nlast")
    assert job.output() == "first\n100%|####|\nlast"
    assert job.output(tail=1) == "last"
    assert job.command == "swiftcore --version"


def test_the_root_on_disk_cannot_shadow_a_module_or_a_plugin(tmp_path: Path) -> None:
    """A folder named like a plugin (a checkpoint `tiny/`) and a `click.py` in the root: `python -m` there would
    put them first on sys.path (plugin 'tiny' ambiguous, click broken); the CLI the page runs ignores them."""
    (tmp_path / "tiny").mkdir()
    (tmp_path / "click.py").write_text("raise SystemExit('the root shadowed click')\n")
    env = {"SWIFTCORE_PLUGINS": "tiny"}
    job = Job(["plugins", "--json"], cwd=tmp_path, env=env)
    assert job.wait(120) == 0, job.output()
    names = [row["name"] for row in json.loads(job.output())["plugins"]]
    assert "tiny" in names
    # The fallback when the console script is missing: the same, with the working directory off sys.path.
    done = subprocess.run(
        [sys.executable, "-c", jobs._SAFE_MAIN, "plugins", "--json"],
        cwd=tmp_path,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "tiny" in [row["name"] for row in json.loads(done.stdout)["plugins"]]


def test_stop_ends_the_command_and_its_children(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    marker = tmp_path / "child.pid"
    script = (
        "import subprocess, sys, time;"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']);"
        f"open({str(marker)!r}, 'w').write(str(child.pid)); print('started', flush=True); time.sleep(600)"
    )
    monkeypatch.setattr(jobs, "cli_argv", lambda *args: [sys.executable, "-c", script])
    job = Job([], cwd=tmp_path)
    deadline = time.monotonic() + 60
    while not marker.exists() or not marker.read_text():
        assert time.monotonic() < deadline and job.running, job.output()
        time.sleep(0.1)
    child = int(marker.read_text())
    job.stop(grace=5)
    assert not job.running and job.returncode is not None and job.returncode < 0
    deadline = time.monotonic() + 10
    while _alive(child):
        assert time.monotonic() < deadline, "the command's child survived stop()"
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by init) is not running
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return True


def test_read_log_skips_a_line_being_written(tmp_path: Path) -> None:
    log = tmp_path / "logs.jsonl"
    assert read_log(log) == []
    log.write_text('{"step": 1, "loss": 2.5}\n[1]\n{"step": 2, "loss": 2.0}\n{"step": 3, "lo')
    assert read_log(log) == [{"step": 1, "loss": 2.5}, {"step": 2, "loss": 2.0}]


def test_progress_comes_from_logs_and_checkpoints(tmp_path: Path) -> None:
    rows = [
        {"step": 1, "loss": 3.0},
        {"step": 2, "loss": 2.0, "eval_loss": 2.5},
        {"step": 2, "loss": float("nan")},
        {"step": 4, "loss": 1.5},
        {"step": 4, "train_loss": 2.1, "train_runtime": 1.0},
    ]
    (tmp_path / "logs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for name in ("checkpoint-2", "checkpoint-10", "checkpoint-9", ".staging"):
        (tmp_path / name).mkdir()
    (tmp_path / "checkpoint-11").write_text("a file, not a checkpoint")
    running = progress_of(tmp_path, 8, running=True, returncode=None, seconds=3.0)
    assert (running.step, running.max_steps, running.fraction) == (4, 8, 0.5)
    assert running.losses == [(1, 3.0), (2, 2.0), (4, 1.5)]  # NaN left out
    assert running.eval_losses == [(2, 2.5)]
    assert (running.loss, running.train_loss) == (1.5, 2.1)
    assert running.checkpoint is None and not running.finished
    done = progress_of(tmp_path, 8, running=False, returncode=0, seconds=5.0)
    assert done.finished and done.checkpoint == tmp_path / "checkpoint-10"
    failed = progress_of(tmp_path, 8, running=False, returncode=2, seconds=5.0)
    assert not failed.finished
    assert last_checkpoint(tmp_path / "missing") is None


def test_progress_reads_the_eval_accuracy_and_the_best_checkpoint(tmp_path: Path) -> None:
    """``--eval-every``'s rows: accuracy per step (the page's second plot) and the best checkpoint, once a folder of
    the run; a log naming anything else is not followed."""
    rows = [
        {"step": 0, "eval_accuracy": 0.0, "eval_checkpoint": None},
        {"step": 2, "loss": 2.0},
        {"step": 2, "eval_accuracy": 0.5, "eval_checkpoint": "checkpoint-2"},
        {"step": 4, "eval_accuracy": 0.25, "eval_checkpoint": "checkpoint-4"},
        {"step": 4, "best_checkpoint": "checkpoint-2", "best_metric": "eval_accuracy", "best_value": 0.5},
    ]
    (tmp_path / "logs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for name in ("checkpoint-2", "checkpoint-4"):
        (tmp_path / name).mkdir()
    running = progress_of(tmp_path, 4, running=True, returncode=None, seconds=1.0)
    assert running.eval_accuracies == [(0, 0.0), (2, 0.5), (4, 0.25)]
    assert running.best_checkpoint is None  # known once the run has ended
    done = progress_of(tmp_path, 4, running=False, returncode=0, seconds=2.0)
    assert (done.best_checkpoint, done.checkpoint) == (tmp_path / "checkpoint-2", tmp_path / "checkpoint-4")
    for name in ("..", "../checkpoint-2", "checkpoint-9"):
        rows[-1]["best_checkpoint"] = name
        (tmp_path / "logs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        assert progress_of(tmp_path, 4, running=False, returncode=0, seconds=2.0).best_checkpoint is None
