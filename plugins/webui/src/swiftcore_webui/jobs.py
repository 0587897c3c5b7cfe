"""The CLI in subprocesses: every action of the page that makes, trains, exports or checks runs ``swiftcore ...``.

The web UI imports no training, conversion or checking code. It starts the real command line
(:func:`cli_argv`: this interpreter, ``-m swiftcore.cli.main``, the module the ``swiftcore`` console script calls)
in the root folder, with the plugin set the page was started with (``SWIFTCORE_PLUGINS``), and reads what the
command prints and the files it writes. A training run's progress comes from its ``logs.jsonl`` (one JSON object
per logged step, written by ``swiftcore train``) and its checkpoints (``checkpoint-N`` folders) in the output folder.

Importing this module imports no gradio, torch or transformers.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Job", "TrainProgress", "TrainRun", "cli_argv", "last_checkpoint", "progress_of", "read_log"]

#: How many lines of a command's output are kept.
_KEPT_LINES = 2000
_CHECKPOINT = re.compile(r"checkpoint-(\d+)$")


#: ``swiftcore`` when its console script is missing: the CLI's ``main`` with the working directory taken off
#: ``sys.path``, as a console script runs it (``python -m`` and ``-c`` would put the root first on ``sys.path``, where
#: a folder or ``.py`` file of the user's would shadow a module: a checkpoint folder named ``tiny`` makes the plugin
#: name ``tiny`` ambiguous).
_SAFE_MAIN = (
    "import os, sys; sys.path[:] = [p for p in sys.path if p not in ('', os.getcwd())]; "
    "from swiftcore.cli.main import main; sys.exit(main())"
)


def cli_argv(*args: str) -> list[str]:
    """The command line of ``swiftcore ARGS`` in the environment the page runs in: the ``swiftcore`` console script
    beside this interpreter (which calls ``swiftcore.cli.main:main``), else this interpreter running that function."""
    script = Path(sys.executable).with_name("swiftcore.exe" if os.name == "nt" else "swiftcore")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script), *args]
    return [sys.executable, "-c", _SAFE_MAIN, *args]


class Job:
    """One ``swiftcore`` command running in a subprocess; its output (stdout and stderr) is collected as it comes.

    The process runs in a session of its own, so :meth:`stop` ends it and everything it started (data loader
    workers, ranks). Carriage returns (progress bars) overwrite the current line, as on a terminal.

    Args:
        args: the arguments after ``swiftcore``.
        cwd: the folder it runs in.
        env: extra environment variables.
    """

    def __init__(self, args: Sequence[str], *, cwd: str | os.PathLike[str], env: dict[str, str] | None = None):
        self.args = list(args)
        self.started = time.monotonic()
        self.ended: float | None = None
        self._lines: deque[str] = deque(maxlen=_KEPT_LINES)
        self._current = ""
        self._lock = threading.Lock()
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.process = subprocess.Popen(
            cli_argv(*self.args),
            cwd=os.fspath(cwd),
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, name="swiftcore-webui-job", daemon=True)
        self._reader.start()

    @property
    def command(self) -> str:
        """The command as a user would type it."""
        import shlex

        return "swiftcore " + " ".join(shlex.quote(a) for a in self.args)

    def _read(self) -> None:
        assert self.process.stdout is not None
        decoder = _Utf8()
        while True:
            chunk = self.process.stdout.read1(65536)  # type: ignore[attr-defined]
            if not chunk:
                break
            self._feed(decoder.decode(chunk))
        self._feed(decoder.decode(b"", final=True))
        with self._lock:
            if self._current:
                self._lines.append(self._current)
                self._current = ""
        self.process.wait()
        self.ended = time.monotonic()

    def _feed(self, text: str) -> None:
        with self._lock:
            for piece in re.split(r"(\r\n|\n|\r)", text):
                if piece in ("\n", "\r\n"):
                    self._lines.append(self._current)
                    self._current = ""
                elif piece == "\r":
                    self._current = ""  # the next text overwrites the line, as a terminal shows it
                else:
                    self._current += piece

    @property
    def running(self) -> bool:
        """Whether the command is still running (or its last output is still being read)."""
        return self._reader.is_alive()

    @property
    def returncode(self) -> int | None:
        """The exit status once finished (negative: ended by that signal), else None."""
        return None if self.running else self.process.returncode

    @property
    def seconds(self) -> float:
        """How long it ran (so far)."""
        return (self.ended or time.monotonic()) - self.started

    def output(self, tail: int | None = None) -> str:
        """What it printed (the last ``tail`` lines), the line being written included."""
        with self._lock:
            lines = [*self._lines, *([self._current] if self._current else [])]
        return "\n".join(lines[-tail:] if tail else lines)

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for it to finish (and its output to be read); its exit status, or None on timeout."""
        self._reader.join(timeout)
        return self.returncode

    def stop(self, grace: float = 10.0) -> None:
        """End it and its children: SIGTERM to its process group, SIGKILL after ``grace`` seconds."""
        if self.process.poll() is None:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(self.process.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.process.wait(grace)
                    break
                except subprocess.TimeoutExpired:
                    continue
        self._reader.join(grace)


class _Utf8:
    """An incremental UTF-8 decoder (a character split across reads is kept for the next one)."""

    def __init__(self) -> None:
        import codecs

        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def decode(self, data: bytes, final: bool = False) -> str:
        return self._decoder.decode(data, final)


# ---------------------------------------------------------------------------------------------------------- training


def read_log(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records of a ``logs.jsonl`` written so far (a line still being written, or not JSON, is skipped)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    rows = []
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def last_checkpoint(output_dir: str | os.PathLike[str]) -> Path | None:
    """The ``checkpoint-N`` folder with the highest N directly in ``output_dir`` (None: none yet)."""
    try:
        found = [(int(m.group(1)), p) for p in Path(output_dir).iterdir() if (m := _CHECKPOINT.search(p.name))]
    except OSError:
        return None
    found = [(n, p) for n, p in found if p.is_dir()]
    return max(found)[1] if found else None


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


@dataclass
class TrainProgress:
    """Where a training run stands, from its ``logs.jsonl`` and output folder.

    Attributes:
        step: the last logged step.
        max_steps: the run's ``--max-steps``.
        losses: ``(step, loss)`` of every logged training loss.
        eval_losses: ``(step, eval_loss)`` of every evaluation.
        eval_accuracies: ``(step, eval_accuracy)`` of every evaluation during training (``--eval-every``).
        loss: the last logged training loss (None before the first log).
        train_loss: the run's mean training loss, logged at its end (``train_loss``).
        running: whether the process still runs.
        returncode: its exit status once finished.
        checkpoint: the last checkpoint written (once finished).
        best_checkpoint: the best checkpoint by ``--best-metric`` (once finished; None without one).
        seconds: how long it has run.
    """

    step: int = 0
    max_steps: int = 0
    losses: list[tuple[int, float]] = field(default_factory=list)
    eval_losses: list[tuple[int, float]] = field(default_factory=list)
    eval_accuracies: list[tuple[int, float]] = field(default_factory=list)
    loss: float | None = None
    train_loss: float | None = None
    running: bool = True
    returncode: int | None = None
    checkpoint: Path | None = None
    best_checkpoint: Path | None = None
    seconds: float = 0.0

    @property
    def fraction(self) -> float:
        """The share of steps done, in [0, 1]."""
        return min(1.0, self.step / self.max_steps) if self.max_steps else 0.0

    @property
    def finished(self) -> bool:
        """Ended with exit status 0."""
        return not self.running and self.returncode == 0


def _inside(output_dir: Path, name: str) -> Path | None:
    """``output_dir/name`` when ``name`` is a ``checkpoint-N`` folder there (a log's ``best_checkpoint`` entry)."""
    path = output_dir / name
    return path if re.fullmatch(r"checkpoint-\d+", name) and path.is_dir() else None


class TrainRun:
    """``swiftcore train`` in a subprocess, and its progress read from its output folder.

    Args:
        args: the arguments after ``swiftcore train`` (``--output-dir`` among them).
        output_dir: the run's output folder (where ``logs.jsonl`` and the checkpoints appear).
        max_steps: its ``--max-steps`` (the progress bar's end).
        cwd: the folder it runs in.
    """

    def __init__(self, args: Sequence[str], *, output_dir: Path, max_steps: int, cwd: str | os.PathLike[str]):
        self.output_dir = Path(output_dir)
        self.max_steps = max_steps
        self.job = Job(["train", *args], cwd=cwd)

    def progress(self) -> TrainProgress:
        """The run's progress now."""
        job = self.job
        running = job.running
        return progress_of(
            self.output_dir, self.max_steps, running=running, returncode=job.returncode, seconds=job.seconds
        )


def progress_of(
    output_dir: str | os.PathLike[str], max_steps: int, *, running: bool, returncode: int | None, seconds: float
) -> TrainProgress:
    """A run's progress read from its output folder (``logs.jsonl``; the last checkpoint once it has ended)."""
    output_dir = Path(output_dir)
    rows = read_log(output_dir / "logs.jsonl")
    losses = [(int(r["step"]), v) for r in rows if "step" in r and (v := _finite(r.get("loss"))) is not None]
    evals = [(int(r["step"]), v) for r in rows if "step" in r and (v := _finite(r.get("eval_loss"))) is not None]
    accuracies = [
        (int(r["step"]), v) for r in rows if "step" in r and (v := _finite(r.get("eval_accuracy"))) is not None
    ]
    best = next((r["best_checkpoint"] for r in reversed(rows) if isinstance(r.get("best_checkpoint"), str)), None)
    steps = [int(r["step"]) for r in rows if isinstance(r.get("step"), (int, float))]
    train_loss = next((v for r in reversed(rows) if (v := _finite(r.get("train_loss"))) is not None), None)
    return TrainProgress(
        step=max(steps, default=0),
        max_steps=max_steps,
        losses=losses,
        eval_losses=evals,
        eval_accuracies=accuracies,
        loss=losses[-1][1] if losses else None,
        train_loss=train_loss,
        running=running,
        returncode=returncode,
        checkpoint=None if running else last_checkpoint(output_dir),
        best_checkpoint=None if running or best is None else _inside(output_dir, best),
        seconds=seconds,
    )
