"""Several ``swiftcore`` command lines run one after another in one process; under torchrun, in one world.

A tiny test run's time is its process's start (importing torch, transformers, peft and megatron-core: 15-20 s on a
busy 2-core machine, against about 1 s for ten steps of a tiny model). Tests that make several runs plan them in a
JSON file and start one process (or one torchrun world) for all of them::

    python -m swiftcore_testing.cli_runs RUNS.json
    torchrun --standalone --nproc-per-node 2 -m swiftcore_testing.cli_runs RUNS.json

``RUNS.json`` is a list of steps, run in order:

- a list of strings: what follows ``swiftcore`` on a command line, run by the CLI's own ``main`` as that command
  runs it (a training engine re-initialises its parallel state for each run, on the world's process group);
- ``{"args": [...], "may_fail": true, "output": PATH}``: such a command line that is expected to fail (a refusal
  test). A failure (a nonzero exit code, or an exception such as ``SwiftcoreError`` or ``SystemExit`` out of
  ``main``) prints ``FAILED i (rank r): ...`` on stderr and does not end the script: rank 0 prints
  ``EXPECTED-FAILURE i`` and writes the failure (exit code, then what the step wrote to stderr) to ``PATH``, and the
  next step runs. If the command succeeds, ``PATH`` is not written (rank 0 removes an old one first), so the caller
  can tell. Only for failures that happen on every rank: a rank that fails while the others go on into a
  collective would leave them waiting, which no script can undo. Where a process group exists after the step, the
  ranks exchange their outcomes (which is also a barrier) and a step that failed on some ranks only ends the script
  (``FAILED i: failed on ranks ... only``);
- ``{"script": PATH, "argv": [...]}``: the Python script ``PATH`` run as ``__main__`` (``runpy.run_path``) with
  ``sys.argv`` set to ``[PATH, *argv]``, in this process and world (a parity script of a test); its
  ``SystemExit`` with a nonzero code is a failure, as is an exception out of it. ``"may_fail"``/``"output"`` apply
  as for ``args``;
- ``{"copy": [SRC, DST], "drop": NAME}``: rank 0 copies the directory SRC to DST and deletes ``DST/NAME`` (a run to
  resume from an earlier checkpoint); every rank waits for it, so none reads DST before it is complete.

Rank 0 prints ``RUN i/n: ARGS`` before each step and ``DONE i`` after it (after a ``may_fail`` step too, failed or
not), so the caller can tell which runs finished; the first other step that fails ends the script with its exit code
(``FAILED i (rank r): exit code c``; an exception propagates).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import traceback
from pathlib import Path
from typing import Any

__all__ = ["main", "run_steps"]


def _distributed() -> bool:
    """Whether a process group exists (never imports torch: without it, none can; steps that need none stay cheap)."""
    dist = sys.modules.get("torch.distributed")
    return dist is not None and dist.is_available() and dist.is_initialized()


def _copy(step: dict[str, Any]) -> None:
    """A ``copy`` step: rank 0 copies and drops, every rank waits (a world's group exists once a run has trained)."""
    distributed = _distributed()
    if not distributed or sys.modules["torch.distributed"].get_rank() == 0:
        source, target = (Path(p) for p in step["copy"])
        shutil.copytree(source, target)
        if step.get("drop"):
            shutil.rmtree(target / step["drop"])
    if distributed:
        sys.modules["torch.distributed"].barrier()


class _Tee:
    """``sys.stderr`` during a ``may_fail`` step: what is written goes on to the real stream and is kept; anything
    else a writer asks of a stream (``encoding``, ``isatty`` ...: click asks before it writes) is the real one's."""

    def __init__(self, stream: Any) -> None:
        self._stream, self.kept = stream, io.StringIO()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def write(self, text: str) -> int:
        self.kept.write(text)
        return self._stream.write(text)

    def flush(self) -> None:
        self._stream.flush()


def _run_script(path: str, argv: list[str]) -> int:
    """A ``script`` step: ``path`` run as ``__main__`` with ``sys.argv = [path, *argv]``; its exit code."""
    import runpy

    saved = sys.argv
    sys.argv = [path, *argv]
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    finally:
        sys.argv = saved
    return 0


def _execute(step: Any) -> int:
    """Run a command line or script step; its exit code (an exception propagates)."""
    from swiftcore.api.cli import main as swiftcore

    if isinstance(step, list):
        return swiftcore([str(a) for a in step])
    if "script" in step:
        return _run_script(str(step["script"]), [str(a) for a in step.get("argv", [])])
    return swiftcore([str(a) for a in step["args"]])


def _may_fail(i: int, step: dict[str, Any], rank: str) -> int:
    """A ``may_fail`` step: its failure, if any, reported and written to its ``output``; 0 unless the ranks
    disagree on whether it failed (then 1)."""
    output = Path(step["output"]) if step.get("output") else None
    if rank == "0" and output is not None:
        output.unlink(missing_ok=True)  # written again only if this run fails: a success leaves no file
    tee = _Tee(sys.stderr)
    sys.stderr = tee
    try:
        code, failure = _execute(step), ""
        if code:
            failure = f"exit code {code}"
    except (Exception, SystemExit) as error:  # the failure this step expects, whatever its type
        code = error.code if isinstance(error, SystemExit) and isinstance(error.code, int) else 1
        failure = f"{type(error).__name__}: {error}\n{traceback.format_exc()}"
        if code == 0:
            failure = ""  # sys.exit(0): a success
    finally:
        sys.stderr = tee._stream
    if failure:
        print(f"FAILED {i} (rank {rank}): {failure.splitlines()[0]}", file=sys.stderr, flush=True)
    if _distributed():  # the same outcome on every rank, and all of them past the step before the next one
        import torch.distributed as dist

        outcomes: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(outcomes, bool(failure))
        if len(set(outcomes)) > 1:
            failed = [r for r, f in enumerate(outcomes) if f]
            print(f"FAILED {i}: failed on ranks {failed} only (may_fail needs a failure on every rank)", flush=True)
            return 1
    if failure and rank == "0":
        print(f"EXPECTED-FAILURE {i}", flush=True)
        if output is not None:
            output.write_text(f"{failure}\n{tee.kept.getvalue()}", encoding="utf-8")
    return 0


def run_steps(steps: list[Any]) -> int:
    """Run ``steps`` (see the module docstring) in this process; the first failing step's exit code, else 0."""
    rank = os.environ.get("RANK", "0")
    for i, step in enumerate(steps, 1):
        if rank == "0":
            print(f"RUN {i}/{len(steps)}: {step if isinstance(step, dict) else ' '.join(step)}", flush=True)
        if isinstance(step, dict) and "copy" in step:
            _copy(step)
        elif isinstance(step, dict) and step.get("may_fail"):
            code = _may_fail(i, step, rank)
            if code:
                return code
        else:
            code = _execute(step)
            if code:
                print(f"FAILED {i} (rank {rank}): exit code {code}", flush=True)
                return code
        if rank == "0":
            print(f"DONE {i}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m swiftcore_testing.cli_runs RUNS.json``: run the steps of that file."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m swiftcore_testing.cli_runs RUNS.json", file=sys.stderr)
        return 2
    return run_steps(json.loads(Path(args[0]).read_text(encoding="utf-8")))


if __name__ == "__main__":
    sys.exit(main())
