"""``swiftcore ARGS`` in a process of its own whose torch, transformers, peft and trl were imported once.

A test that runs the CLI as a user does (its own process: exit code, stdout, stderr, environment, working folder)
pays for importing the heavy stack each time: 8-15 s on a busy 2-core machine, against about 1 s of work for a tiny
model. Profiled on 2026-12-07 (py-spy over 15 minutes of ``make test``), 40% of the suite's CPU time went to imports
in such children. :func:`run_swiftcore` starts the process from multiprocessing's fork server instead: one process per
pytest worker that imported the heavy modules once (``set_forkserver_preload``, the preload below) and forks a child
for each run. The child then takes the environment, working folder, ``sys.path``, ``sys.argv``, stdout and stderr a
fresh ``swiftcore`` process would have, runs the CLI's ``main`` and exits with its code, running the ``atexit``
handlers first as an interpreter's exit does. ``scripts/bench_forked.py`` measures both ways: on a loaded 2-core
machine a 2-step tiny LoRA ``train`` took 14-20 s as a subprocess and 4-4.5 s forked, ``infer`` 12.5 s and 1 s.

Where a fork-server child is not a fresh process, keep ``subprocess``:

- modules already imported: a test of what a command imports (the light commands import no torch) needs a fresh
  interpreter, as does a test of what it prints: the warnings the preloaded modules give when imported went to the
  fork server's stderr, not the command's (``tests/test_no_cuda_advice_on_cpu.py`` stays a subprocess);
- what modules read when imported (``OMP_NUM_THREADS`` by torch, ``HF_HUB_OFFLINE`` by huggingface_hub) comes from
  this process's environment when the fork server started, not from ``env`` (``OMP_NUM_THREADS`` is applied to
  torch's thread count);
- the command's parent is the fork server: a test that needs the process's own parent (a process tree, a
  parent-death signal), its stdin or a pipe of its output needs ``subprocess.Popen``.

:func:`start_swiftcore` starts a command the same way and returns at once (a server a test stops, a run it kills):
:class:`ForkedProcess` has the ``subprocess.Popen`` methods tests use, and signals reach the command itself.

``SWIFTCORE_TESTING_SUBPROCESS=1`` runs each command as a real subprocess instead (the same result is expected: to
check a difference).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["ForkedProcess", "run_swiftcore", "start_swiftcore"]

#: Set to ``1``: :func:`run_swiftcore` starts a real subprocess for each command.
ENV_SUBPROCESS = "SWIFTCORE_TESTING_SUBPROCESS"
#: What the fork server imports once (a module that fails to import is skipped by multiprocessing, so an environment
#: without trl or peft still works, only slower).
PRELOAD = ("swiftcore_testing._fork_preload",)


def run_swiftcore(
    *args: str | os.PathLike[str],
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    timeout: float = 600,
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run([swiftcore, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)``,
    the process forked from the fork server (see the module docstring); ``env`` defaults to this process's.

    Raises:
        subprocess.TimeoutExpired: the command ran past ``timeout`` seconds (it is killed first).
    """
    argv = [str(a) for a in args]
    if _use_subprocess():
        command = [str(Path(sys.executable).with_name("swiftcore")), *argv]
        return subprocess.run(command, env=_environ(env), cwd=cwd, capture_output=True, text=True, timeout=timeout)
    process = start_swiftcore(*argv, env=env, cwd=cwd)
    try:
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            output, errors = process.read_stdout(), process.read_stderr()
            raise subprocess.TimeoutExpired(process.args, timeout, output, errors) from None
        return subprocess.CompletedProcess(process.args, process.wait(), process.read_stdout(), process.read_stderr())
    finally:
        process.close()


def start_swiftcore(
    *args: str | os.PathLike[str],
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    log: str | os.PathLike[str] | None = None,
) -> Any:
    """``subprocess.Popen([swiftcore, *args], env=env, cwd=cwd)`` with stdout and stderr kept for
    ``read_stdout()`` / ``read_stderr()`` (files, readable while it runs; with ``log``, both appended to that file
    instead, as ``stdout=open(log, "a"), stderr=STDOUT`` would), the process forked from the fork server: a server a
    test starts, signals and stops (a :class:`ForkedProcess`: ``poll``, ``wait``, ``terminate``, ``kill``,
    ``send_signal``). Under ``SWIFTCORE_TESTING_SUBPROCESS=1`` a real ``Popen`` with the same two methods."""
    argv = [str(a) for a in args]
    scratch: Path | None = None
    if log is not None:
        out = err = Path(log)
        out.open("a").close()  # there when this returns, as Popen(stdout=open(log, "a")) leaves it
    else:
        scratch = Path(tempfile.mkdtemp(prefix="swiftcore-forked-"))
        out, err = scratch / "stdout", scratch / "stderr"
    if _use_subprocess():
        with out.open("a" if log is not None else "w") as stdout, contextlib.ExitStack() as files:
            stderr = subprocess.STDOUT if log is not None else files.enter_context(err.open("w"))
            popen = subprocess.Popen(
                [str(Path(sys.executable).with_name("swiftcore")), *argv], env=_environ(env), cwd=cwd, stdout=stdout,
                stderr=stderr, text=True,
            )  # fmt: skip
        popen.read_stdout = lambda: _read(out)  # type: ignore[attr-defined]
        popen.read_stderr = lambda: _read(err)  # type: ignore[attr-defined]
        return popen
    folder = str(Path(cwd) if cwd is not None else Path.cwd())
    return ForkedProcess(argv, _environ(env), folder, scratch, out, err)


class ForkedProcess:
    """A ``swiftcore`` command running in a child of the fork server: the ``subprocess.Popen`` methods a test uses.

    The child is the process itself (``pid``): signals reach the command as they would a subprocess; its exit code
    comes back through multiprocessing (the fork server, not this process, is its parent).
    """

    def __init__(
        self, argv: list[str], environ: dict[str, str], cwd: str, scratch: Path | None, out: Path, err: Path
    ) -> None:
        self.args = ["swiftcore", *argv]
        self._scratch, self._out, self._err = scratch, out, err
        paths = _fresh_sys_path(environ.get("PYTHONPATH", ""))
        self._process = _context().Process(
            target=_child, args=(argv, environ, cwd, paths, str(out), str(err)), name="swiftcore"
        )
        self._process.start()
        self.pid: int = self._process.pid  # type: ignore[assignment]

    @property
    def returncode(self) -> int | None:
        """The exit code (negative: the signal that ended it); None while it runs."""
        return self._process.exitcode

    def poll(self) -> int | None:
        """The exit code if it has ended, else None."""
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the end; the exit code. Raises ``subprocess.TimeoutExpired`` after ``timeout`` seconds."""
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self._process.exitcode

    def send_signal(self, signum: int) -> None:
        """Send ``signum`` to the command, if it still runs."""
        if self._process.exitcode is None:
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        """SIGTERM."""
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL."""
        self.send_signal(signal.SIGKILL)

    def read_stdout(self) -> str:
        """What the command wrote to stdout so far."""
        return _read(self._out)

    def read_stderr(self) -> str:
        """What the command wrote to stderr so far."""
        return _read(self._err)

    def close(self) -> None:
        """Remove the files that held its output (once it has ended; a ``log`` stays)."""
        if self._process.exitcode is not None and self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)


def _use_subprocess() -> bool:
    return os.environ.get(ENV_SUBPROCESS) == "1" or sys.platform != "linux"


def _environ(env: Mapping[str, str] | None) -> dict[str, str]:
    return dict(os.environ if env is None else env)


@functools.cache
def _context() -> Any:
    """multiprocessing's fork-server context, its preload set (before the server starts, at first use)."""
    import multiprocessing

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOAD))
    return context


@functools.cache
def _fresh_sys_path(pythonpath: str) -> list[str]:
    """The ``sys.path`` of a fresh ``swiftcore`` console script given ``PYTHONPATH``: the script's folder, then
    ``PYTHONPATH``, then the interpreter's own (asked of a fresh interpreter once: this process's holds pytest's
    additions, and the fork server inherits them)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    shown = subprocess.run(
        [sys.executable, "-c", "import json, sys; print(json.dumps(sys.path[1:]))"],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    extra = [p for p in pythonpath.split(os.pathsep) if p]
    return [str(Path(sys.executable).parent), *extra, *json.loads(shown.stdout)]


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""


def _child(argv: list[str], environ: dict[str, str], cwd: str, paths: list[str], out: str, err: str) -> None:
    """In the forked child: become a fresh ``swiftcore ARGV`` process, run it, exit with its code."""
    os.environ.clear()
    os.environ.update(environ)
    sys.path[:] = paths
    os.chdir(cwd)
    for fd, path in ((1, out), (2, err)):  # one file for both (a log): appended to, as stderr=STDOUT would
        flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if out == err else os.O_TRUNC)
        opened = os.open(path, flags, 0o600)
        os.dup2(opened, fd)
        os.close(opened)
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", line_buffering=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", line_buffering=True)
    sys.argv = [str(Path(paths[0]) / "swiftcore"), *argv]
    if environ.get("PYTHONFAULTHANDLER"):  # read at an interpreter's start: a crash prints the Python stacks
        import faulthandler

        faulthandler.enable()
    threads = environ.get("OMP_NUM_THREADS", "")
    if "torch" in sys.modules and threads.isdigit() and int(threads) > 0:
        sys.modules["torch"].set_num_threads(int(threads))  # torch read the fork server's value when imported
    from swiftcore.api.cli import main

    try:
        code = main(argv)
    except SystemExit:
        raise
    except BaseException:  # as an interpreter ends on an uncaught exception: its traceback, exit code 1
        traceback.print_exc()
        code = 1
    finally:
        atexit._run_exitfuncs()  # an interpreter's exit runs them; multiprocessing's children end with os._exit
        sys.stdout.flush()
        sys.stderr.flush()
    sys.exit(code)
