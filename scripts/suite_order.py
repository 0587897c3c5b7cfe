"""The order pytest-xdist hands the test modules out in: longest first, rank modules spread out.

``make test`` runs the suite on two workers with ``--dist loadfile --no-loadscope-reorder``: each worker, when it runs
low, takes the next module of the collection. The root ``conftest.py`` orders the collection with :func:`plan`, from
each module's seconds in the last measured run (``tests/module_seconds.json``), so that

- the longest modules start first and the run does not end with one worker on a long module while the other idles
  (longest-processing-time-first list scheduling);
- a module that starts torch.distributed ranks (which holds the run's rank lock, see ``conftest.py``) is taken only
  when the simulated lock is free, so a worker fills the time another holds the lock with other modules instead of
  waiting for it.

Update the record from a run's worker timeline (the root conftest writes it under pytest-xdist)::

    python scripts/suite_order.py /tmp/pytest-of-$USER/pytest-current/worker-timeline.tsv

Without xdist nothing is reordered. A module missing from the record counts :data:`SECONDS_PER_TEST` a test.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "tests" / "module_seconds.json"
#: The estimate for a test of a module the record does not know yet (a new module).
SECONDS_PER_TEST = 2.0


def load_record(path: Path = RECORD) -> dict[str, float]:
    """Each module's seconds (path relative to the repository root) in the last measured run; empty without one."""
    try:
        return {str(k): float(v) for k, v in json.loads(path.read_text(encoding="utf-8")).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def plan(modules: Iterable[tuple[str, int, bool]], seconds: dict[str, float], workers: int) -> list[str]:
    """The modules in the order to hand them out: ``modules`` are ``(path, number of tests, starts ranks)``.

    A simulation of ``workers`` workers: the first free one takes the longest module left, except that a rank module
    waits while another holds the lock (the worker takes the longest other module meanwhile; only rank modules left:
    it waits).
    """
    estimate = {path: seconds.get(path, SECONDS_PER_TEST * count) for path, count, _ in modules}
    ranks = {path for path, _, starts in modules if starts}
    left = sorted(estimate, key=lambda path: (-estimate[path], path))
    free_at = [0.0] * max(workers, 1)
    lock_free_at = 0.0
    order: list[str] = []
    while left:
        worker = min(range(len(free_at)), key=free_at.__getitem__)
        now = free_at[worker]
        pick = next((path for path in left if path not in ranks or lock_free_at <= now), left[0])
        start = max(now, lock_free_at) if pick in ranks else now
        free_at[worker] = start + estimate[pick]
        if pick in ranks:
            lock_free_at = free_at[worker]
        left.remove(pick)
        order.append(pick)
    return order


def read_timeline(timeline: Path) -> list[tuple[str, str, str, float, float]]:
    """A worker timeline's rows, ``(worker, kind, module, start, end)``: ``kind`` is ``module`` (a module's span,
    ``module`` its path) or ``lock-wait`` (a wait for the rank lock, no module)."""
    rows = [line.split("\t") for line in timeline.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [(worker, kind, module, float(start), float(end)) for worker, kind, module, start, end in rows]


def record_from_timeline(timeline: Path) -> dict[str, float]:
    """Each module's seconds from a worker timeline: its span less the time its worker waited for the rank lock within
    it (a wait says how busy the other worker was, not this module)."""
    rows = read_timeline(timeline)
    waits = [(worker, a, b) for worker, kind, _, a, b in rows if kind == "lock-wait"]
    seconds: dict[str, float] = {}
    for worker, kind, module, start, end in rows:
        if kind == "module":
            waited = sum(b - a for w, a, b in waits if w == worker and start <= a <= end)
            seconds[module] = round(seconds.get(module, 0.0) + end - start - waited, 1)
    return dict(sorted(seconds.items()))


def main(argv: list[str]) -> int:
    """``suite_order.py TIMELINE``: merge the timeline's module seconds into the record (modules it lacks are kept)."""
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    record = {**load_record(), **record_from_timeline(Path(argv[0]))}
    RECORD.write_text(json.dumps(dict(sorted(record.items())), indent=1) + "\n", encoding="utf-8")
    print(f"{RECORD.relative_to(ROOT)}: {len(record)} modules, {sum(record.values()) / 60:.0f} min in all")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
