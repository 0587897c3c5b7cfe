"""Several ``swiftcore`` command lines run one after another in one process; under torchrun, in one world.

A tiny test run's time is its process's start (importing torch, transformers, peft and megatron-core: 15-20 s on a
busy 2-core machine, against about 1 s for ten steps of a tiny model). Tests that make several runs plan them in a
JSON file and start one process (or one torchrun world) for all of them::

    python -m swiftcore_testing.cli_runs RUNS.json
    torchrun --standalone --nproc-per-node 2 -m swiftcore_testing.cli_runs RUNS.json

``RUNS.json`` is a list of steps, run in order:

- a list of strings: what follows ``swiftcore`` on a command line, run by the CLI's own ``main`` as that command
  runs it (a training engine re-initialises its parallel state for each run, on the world's process group);
- ``{"copy": [SRC, DST], "drop": NAME}``: rank 0 copies the directory SRC to DST and deletes ``DST/NAME`` (a run to
  resume from an earlier checkpoint); every rank waits for it, so none reads DST before it is complete.

Rank 0 prints ``RUN i/n: ARGS`` before each step and ``DONE i`` after it, so the caller can tell which runs finished;
the first step that fails ends the script with its exit code (``FAILED i (rank r): exit code c``).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

__all__ = ["main", "run_steps"]


def _copy(step: dict[str, Any]) -> None:
    """A ``copy`` step: rank 0 copies and drops, every rank waits (a world's group exists once a run has trained)."""
    import torch.distributed as dist

    distributed = dist.is_available() and dist.is_initialized()
    if not distributed or dist.get_rank() == 0:
        source, target = (Path(p) for p in step["copy"])
        shutil.copytree(source, target)
        if step.get("drop"):
            shutil.rmtree(target / step["drop"])
    if distributed:
        dist.barrier()


def run_steps(steps: list[Any]) -> int:
    """Run ``steps`` (see the module docstring) in this process; the first failing step's exit code, else 0."""
    from swiftcore.api.cli import main as swiftcore

    rank = os.environ.get("RANK", "0")
    for i, step in enumerate(steps, 1):
        if rank == "0":
            print(f"RUN {i}/{len(steps)}: {step if isinstance(step, dict) else ' '.join(step)}", flush=True)
        if isinstance(step, dict):
            _copy(step)
        else:
            code = swiftcore([str(a) for a in step])
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
