"""Shared pieces of the benchmarks: alternating runs, statistics, child processes with peak RSS, raw JSON.

Every comparison runs the systems in turn (A B A B ...) so that drift of a shared machine hits both
alike; :func:`summarize` reports the median, min and max per system and the median of the per-pair
ratios (``A[i] / B[i]``, which cancels drift better than a ratio of medians).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RAW = ROOT / "bench" / "raw"
PEER_PYTHON = ROOT / ".venv-peers" / "bin" / "python"
PEER_SWIFT = ROOT / ".venv-peers" / "bin" / "swift"

__all__ = ["ChildRun", "alternate", "machine", "replace_section", "run_child", "summarize", "write_raw", "ROOT",
           "RAW", "PEER_PYTHON", "PEER_SWIFT"]


def machine() -> dict[str, Any]:
    """Where the numbers were taken: CPU model, cores, memory, OS, date."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gb = None
    try:
        mem_gb = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError):
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gb": mem_gb, "os": platform.platform(),
            "python": platform.python_version(), "date": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def machine_text(m: dict[str, Any] | str) -> str:
    """A figure's machine in words: ``"AMD EPYC, 2 cores, 23.5 GB"`` from :func:`machine` (a string is kept)."""
    if isinstance(m, str):
        return m
    return ", ".join(x for x in (m.get("cpu"), m.get("cores") and f"{m['cores']} cores",
                                 m.get("memory_gb") and f"{m['memory_gb']} GB") if x)  # fmt: skip


def alternate(runs: int, systems: dict[str, Callable[[], float]]) -> dict[str, list[float]]:
    """Call each system's function once per round, in turn, for ``runs`` rounds; collect the values."""
    out: dict[str, list[float]] = {name: [] for name in systems}
    for _ in range(runs):
        for name, fn in systems.items():
            out[name].append(fn())
    return out


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    """Wall and CPU (all threads) seconds of ``fn()``, from a collected heap; the result is freed after."""
    import gc

    gc.collect()
    start, start_cpu = time.perf_counter(), time.process_time()
    result = fn()
    out = time.perf_counter() - start, time.process_time() - start_cpu
    del result
    return out


def summarize(values: Sequence[float]) -> dict[str, float]:
    """Median, min, max and count of ``values``."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def pair_ratio(a: Sequence[float], b: Sequence[float]) -> dict[str, float]:
    """Median (and range) of the per-pair ratios ``a[i] / b[i]``."""
    ratios = [x / y for x, y in zip(a, b, strict=True) if y]
    return summarize(ratios)


@dataclass
class ChildRun:
    """One finished child process: exit status, wall seconds, peak RSS of the largest process in its tree."""

    returncode: int
    seconds: float
    peak_rss_mb: float
    output: str


def _tree_rss(proc: Any) -> int:
    """Bytes resident in ``proc`` and all its descendants right now (0 once it is gone)."""
    import psutil

    total = 0
    try:
        for p in [proc, *proc.children(recursive=True)]:
            try:
                total += p.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
    except psutil.NoSuchProcess:
        return 0
    return total


def run_child(argv: Sequence[str], *, cwd: str | Path | None = None, env: dict[str, str] | None = None,
              timeout: float = 900, watch: Callable[[], None] | None = None) -> ChildRun:
    """Run ``argv`` to completion, capturing its output, and measure it; ``watch`` is called at every poll
    (every 20 ms), e.g. to time the lines a run appends to its log.

    Peak RSS is the largest sum of resident memory over the child and its descendants (sampled every
    20 ms), so a launcher that spawns the real worker (``swift sft``) counts both. ``ru_maxrss`` from
    ``wait4`` cannot be used: Linux carries the parent's high-water mark into a forked child, so every
    child of a big benchmark process would report the benchmark's own size.
    """
    import psutil

    log = RAW / f".child-{os.getpid()}.log"
    RAW.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    peak = 0
    with log.open("w+b") as fh:
        proc = subprocess.Popen(list(argv), cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT)
        watched = psutil.Process(proc.pid)
        while proc.poll() is None:
            peak = max(peak, _tree_rss(watched))
            if watch is not None:
                watch()
            if time.perf_counter() - start > timeout:
                proc.kill()
                proc.wait()
                break
            time.sleep(0.02)
        seconds = time.perf_counter() - start
        fh.seek(0)
        output = fh.read().decode("utf-8", "replace")
    log.unlink(missing_ok=True)
    return ChildRun(proc.returncode, seconds, peak / 2**20, output)


def write_raw(name: str, data: dict[str, Any]) -> Path:
    """Write ``bench/raw/NAME.json`` and return its path."""
    RAW.mkdir(parents=True, exist_ok=True)
    path = RAW / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def replace_section(section: str, begin: str, end: str) -> Path:
    """Put ``section`` (which starts with ``begin`` and ends with ``end``) into RESULTS.md: in place of the
    section between those markers, or appended; returns the file's path."""
    results = ROOT / "bench" / "RESULTS.md"
    text = results.read_text(encoding="utf-8")
    if begin in text:
        text = text[: text.index(begin)] + section + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    results.write_text(text, encoding="utf-8")
    return results
