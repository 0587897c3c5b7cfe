"""The training output directory: never mix two runs, remove only what swiftcore wrote, never an input.

A fresh run needs an empty (or new) ``--output-dir``. ``--overwrite-output-dir`` reuses a directory an
earlier ``swiftcore train`` wrote: it removes the entries that run recorded in its manifest
(:data:`MANIFEST`, names matching :data:`OUTPUT_PATTERNS`) and nothing else, and never a path that is, or
contains, an input of the new run (its model, adapter, datasets). ``--resume-from-checkpoint`` continues
the run in place. Everything is decided by :func:`plan_output_dir` before anything on disk changes.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

from swiftcore.api import SwiftcoreError

__all__ = [
    "MANIFEST",
    "OUTPUT_PATTERNS",
    "OutputPlan",
    "apply_output_plan",
    "last_checkpoint",
    "plan_output_dir",
    "trim_log",
]

#: The manifest a run writes first into its output directory.
MANIFEST = "swiftcore_outputs.json"
#: What ``swiftcore train`` writes into an output directory (glob patterns on entry names).
OUTPUT_PATTERNS = ("args.json", "logs.jsonl", "eval_samples.jsonl", "loss.png", "checkpoint-*", ".staging", MANIFEST)
#: A checkpoint directory's name (transformers' ``checkpoint-{global_step}``).
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def last_checkpoint(directory: Path | str) -> Path | None:
    """The newest ``checkpoint-N`` directory in ``directory`` (highest N), or None (none, or no such directory).

    transformers' ``get_last_checkpoint`` picks the same one; it is not used because importing transformers takes
    seconds, and ``--resume-from-checkpoint latest`` is checked (and a missing checkpoint refused) before anything
    heavy loads.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return None
    steps = {int(m.group(1)): p for p in directory.iterdir() if (m := _CHECKPOINT.match(p.name)) and p.is_dir()}
    return steps[max(steps)] if steps else None


@dataclass
class OutputPlan:
    """What preparing the output directory will do.

    Attributes:
        directory: the output directory.
        remove: earlier swiftcore outputs that ``--overwrite-output-dir`` removes.
        kept: earlier swiftcore outputs kept because they are (or hold) an input of this run.
    """

    directory: Path
    remove: list[Path] = field(default_factory=list)
    kept: list[Path] = field(default_factory=list)


def _is_or_holds(path: Path, inputs: list[Path]) -> bool:
    target = path.resolve()
    return any(target == item or target in item.parents for item in inputs)


def plan_output_dir(
    output_dir: str | Path, *, resume: bool, overwrite: bool, inputs: tuple[str | Path, ...] = ()
) -> OutputPlan:
    """Decide what preparing ``output_dir`` does; raise before anything is touched when it must not be used.

    Args:
        output_dir: the run's ``--output-dir``.
        resume: the run continues a checkpoint in this directory (nothing is removed).
        overwrite: ``--overwrite-output-dir``.
        inputs: the run's input paths (model, adapter, datasets), protected from removal.

    Raises:
        SwiftcoreError: the path is a file; the directory is not empty and neither ``resume`` nor
            ``overwrite`` is given; or ``overwrite`` is given for a directory swiftcore did not write.
    """
    directory = Path(output_dir)
    if directory.exists() and not directory.is_dir():
        raise SwiftcoreError(f"--output-dir {str(directory)!r} is a file; give a directory (new or empty)")
    plan = OutputPlan(directory)
    if resume or not directory.exists():
        return plan
    entries = sorted(directory.iterdir())
    if not entries:
        return plan
    if not overwrite:
        shown = ", ".join(e.name for e in entries[:5]) + (", ..." if len(entries) > 5 else "")
        raise SwiftcoreError(
            f"--output-dir {str(directory)!r} is not empty ({shown}); nothing was changed. Pass "
            "--resume-from-checkpoint latest to continue the run there, --overwrite-output-dir to replace what "
            "an earlier swiftcore run wrote there, or give a new or empty directory"
        )
    recorded = _recorded_patterns(directory)
    protected = [Path(i).expanduser().resolve() for i in inputs if i]
    for entry in entries:
        if entry.is_symlink() or not any(fnmatch(entry.name, pattern) for pattern in recorded):
            continue  # not something swiftcore wrote: never touched
        (plan.kept if _is_or_holds(entry, protected) else plan.remove).append(entry)
    return plan


def _recorded_patterns(directory: Path) -> tuple[str, ...]:
    """The output patterns an earlier run recorded in its manifest (only those swiftcore writes count)."""
    manifest = directory / MANIFEST
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SwiftcoreError(
            f"--overwrite-output-dir: {str(directory)!r} has no {MANIFEST}, so it was not written by swiftcore "
            "train (or by a version that kept no manifest); nothing was changed. Give a new or empty "
            "--output-dir, or remove its content yourself"
        ) from None
    except (OSError, ValueError) as exc:
        raise SwiftcoreError(f"{manifest}: cannot read it ({exc}); nothing was changed") from exc
    patterns = data.get("outputs") if isinstance(data, dict) else None
    if not isinstance(patterns, list):
        raise SwiftcoreError(f"{manifest}: field 'outputs' must be a list of names; nothing was changed")
    # A manifest is a file on disk anyone can edit: only names swiftcore itself writes are honoured.
    return tuple(p for p in patterns if p in OUTPUT_PATTERNS)


def apply_output_plan(plan: OutputPlan, **manifest_extra: Any) -> None:
    """Remove the earlier outputs ``plan`` lists, create the directory and write the manifest."""
    import logging

    log = logging.getLogger("swiftcore.train")
    for path in plan.kept:
        log.warning("--overwrite-output-dir: keeping %s, an input of this run", path)
    for path in plan.remove:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    plan.directory.mkdir(parents=True, exist_ok=True)
    record = {"written_by": "swiftcore train", "outputs": list(OUTPUT_PATTERNS), **manifest_extra}
    (plan.directory / MANIFEST).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def trim_log(log_file: Path, last_step: int) -> int:
    """Drop the records of steps after ``last_step`` from ``logs.jsonl`` (a resumed run logs them again).

    Returns:
        How many records were dropped.
    """
    if not log_file.is_file():
        return 0
    keep, dropped = [], 0
    for line in log_file.read_text(encoding="utf-8").splitlines():
        try:
            step = json.loads(line).get("step", 0)
        except ValueError:
            dropped += 1  # a line cut by the kill that ended the earlier run
            continue
        if isinstance(step, int) and step > last_step:
            dropped += 1
        else:
            keep.append(line)
    if dropped:
        tmp = log_file.with_name(log_file.name + ".tmp")
        tmp.write_text("".join(line + "\n" for line in keep), encoding="utf-8")
        tmp.replace(log_file)
    return dropped
