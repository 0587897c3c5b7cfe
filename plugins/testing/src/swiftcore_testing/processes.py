"""Run ``swiftcore`` as a user does, from a test: a clean environment, a free port, a ``deploy`` server process.

    with deploy_process("--model", str(checkpoint), env=user_env(SWIFTCORE_API_KEY=KEY)) as (base_url, proc):
        client = openai.OpenAI(base_url=f"{base_url}/v1", api_key=KEY)

The server is a process of its own (``swiftcore deploy``, forked from :mod:`swiftcore_testing.forked`'s fork server
when it is this environment's swiftcore) on a free loopback port, waited for through ``GET /health``, and stopped
(terminate, then kill) when the block ends.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["deploy_process", "failure_report", "free_port", "user_env"]

#: Variables swiftcore or torchrun read, left out of :func:`user_env` so no test's state leaks into a child (an
#: in-process vLLM engine, for one, exports ``LOCAL_WORLD_SIZE=1`` to this process).
_DROPPED = (
    "SWIFTCORE_",
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_",
    "TORCHELASTIC_",
    "MASTER_",
    "ACCELERATE_",
)


def user_env(**extra: str) -> dict[str, str]:
    """This process's environment as a user's shell has it: no plugin set, rank or world size an earlier test
    exported; unbuffered output; ``extra`` on top. A child that dies of a signal (a rank's abort) prints its Python
    stacks first (``PYTHONFAULTHANDLER``), so a test's failure shows where it was."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_DROPPED)}
    return {**env, "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1", **extra}


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


#: Lines that start what explains a failed process (a traceback, a C++ abort) rather than a launcher's summary of it.
_FIRST_CAUSE = ("Traceback (most recent call last)", "terminate called", "Fatal Python error", "[E ", "RuntimeError")


def failure_report(proc: subprocess.CompletedProcess, tail: int = 4000) -> str:
    """What a failed process printed, for a test's failure message: its exit code, the first traceback or abort in
    its stderr (torchrun prints its own summary last, after the rank's cause), then the tails of stderr and stdout."""
    err, out = proc.stderr or "", proc.stdout or ""
    starts = [i for i in (err.find(mark) for mark in _FIRST_CAUSE) if i >= 0]
    first = err[min(starts) : min(starts) + tail] if starts and min(starts) < len(err) - tail else ""
    parts = [f"exit code {proc.returncode}"]
    parts += [f"--- first cause in stderr\n{first}"] if first else []
    return "\n".join([*parts, f"--- stderr (end)\n{err[-tail:]}", f"--- stdout (end)\n{out[-tail // 2 :]}"])


@contextmanager
def deploy_process(
    *args: str,
    env: Mapping[str, str] | None = None,
    timeout: float = 240,
    served_model_name: str | None = "tuned",
    python: str = sys.executable,
) -> Iterator[tuple[str, Any]]:
    """Start ``swiftcore deploy ARGS`` on a free port and yield ``(base_url, process)`` once ``/health`` answers.

    With this environment's interpreter the server is forked from :mod:`swiftcore_testing.forked`'s fork server (its
    torch and transformers imported once per test worker; the process a ``ForkedProcess``); with another venv's
    (``python``), a ``subprocess.Popen``.

    Args:
        args: the ``deploy`` arguments (``--model DIR`` ...), without ``--port``.
        env: the child's environment (default: :func:`user_env`).
        timeout: seconds to wait for ``/health``.
        served_model_name: ``--served-model-name`` (None: the server's default).
        python: the interpreter that runs swiftcore (another venv's, for a user's install).

    Raises:
        AssertionError: the server exited, or did not answer within ``timeout`` (with its stderr).
    """
    import httpx

    port = free_port()
    argv = ["deploy", *args, "--port", str(port), "--log-level", "warning"]
    if served_model_name:
        argv += ["--served-model-name", served_model_name]
    if Path(python) == Path(sys.executable):  # this environment's swiftcore: forked, its imports made once
        from swiftcore_testing.forked import start_swiftcore

        proc: Any = start_swiftcore(*argv, env=dict(env or user_env()))
        errors: Callable[[], str] = proc.read_stderr
    else:
        proc = subprocess.Popen(
            [python, "-m", "swiftcore.cli.main", *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env=dict(env or user_env()),
        )  # fmt: skip
        errors = proc.stderr.read
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"swiftcore deploy exited: {errors()[-3000:]}")
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, f"swiftcore deploy did not come up in {timeout:.0f} s"
            time.sleep(0.5)
        yield base, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if hasattr(proc, "close"):
            proc.close()
