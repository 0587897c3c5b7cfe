"""py-spy for the benchmarks: record a process (attached, or started under it) and summarize its stacks.

A summary counts, from py-spy's raw (collapsed) stacks, the samples per thread, the top functions by own samples and
the samples inside each of a figure's *markers* (label -> regular expression on a frame, ``function (package/file.py)``;
a sample counts for a marker when any frame of its stack matches). Figures 12 (serving) and 15 (template encode)
use it.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["PY_SPY", "frame_name", "record", "start", "stop", "summarize"]

PY_SPY = Path(sys.executable).parent / "py-spy"


def _binary() -> str:
    if not PY_SPY.exists():
        raise FileNotFoundError(f"{PY_SPY}: pip install py-spy into the environment to profile")
    return str(PY_SPY)


def start(target: Sequence[str], out: Path, rate: int = 100, *, threads: bool = True, nonblocking: bool = True,
          idle: bool = False, capture: bool = False) -> subprocess.Popen:  # fmt: skip
    """Start ``py-spy record`` writing raw stacks to ``out``; ``target``: ``["--pid", PID]`` or ``["--", *argv]``;
    ``capture``: keep the standard output (a started child's), for :func:`record` to return."""
    argv = [_binary(), "record", "--rate", str(rate), "--format", "raw", "--output", str(out)]
    argv += ["--threads"] * threads + ["--nonblocking"] * nonblocking + ["--idle"] * idle
    stdout = subprocess.PIPE if capture else subprocess.DEVNULL
    return subprocess.Popen([*argv, *target], stdout=stdout, stderr=subprocess.PIPE, text=True)


def stop(proc: subprocess.Popen, out: Path, markers: Mapping[str, str], seconds: float | None = None,
         rate: int = 100) -> dict[str, Any]:  # fmt: skip
    """Stop an attached recording (SIGINT) and summarize it; ``{"error": ...}`` when py-spy wrote nothing."""
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return _summary(out, err, markers, seconds, rate)


def record(argv: Sequence[str], out: Path, markers: Mapping[str, str], rate: int = 100,
           **options: bool) -> dict[str, Any]:  # fmt: skip
    """Run ``argv`` under py-spy to its end and summarize the recording (shares of all samples); with
    ``capture=True`` the summary's ``stdout`` is what was printed (py-spy's own lines among the child's).
    ``{"error": ...}`` when py-spy failed or wrote nothing. py-spy exits 0 whatever the child's exit code, so a
    caller checks the child's own result (a file it writes, a line it prints)."""
    proc = start(["--", *argv], out, rate, **options)
    printed, err = proc.communicate()
    if proc.returncode != 0:
        return {"error": (err or "").strip()[-500:] or f"exit code {proc.returncode}"}
    summary = _summary(out, err, markers, None, rate)
    return summary if printed is None or "error" in summary else {**summary, "stdout": printed}


def _summary(out: Path, err: str | None, markers: Mapping[str, str], seconds: float | None,
             rate: int) -> dict[str, Any]:  # fmt: skip
    if not out.exists():
        return {"error": (err or "").strip()[-500:] or "py-spy wrote nothing"}
    return summarize(out.read_text(errors="replace"), markers, seconds, rate)


def frame_name(frame: str) -> str:
    """``function (file:line)`` -> ``function (package/file.py)``: line numbers dropped, paths shortened."""
    match = re.match(r"(.*) \((.*?)(?::\d+)?\)$", frame)
    if not match:
        return frame
    function, path = match.groups()
    path = re.sub(r".*/(site-packages|src|lib/python3\.\d+)/", "", path)
    return f"{function} ({path})"


def summarize(raw: str, markers: Mapping[str, str], seconds: float | None = None, rate: int = 100,
              top: int = 12) -> dict[str, Any]:  # fmt: skip
    """py-spy's raw stacks -> samples per thread, top functions by own samples, and the samples inside each marker;
    shares are of the wall clock (``seconds`` x ``rate`` samples per thread) when given, else of all samples."""
    threads: dict[str, int] = {}
    own: dict[str, int] = {}
    inside = dict.fromkeys(markers, 0)
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        if frames[0].startswith(("thread (", "process ")):
            name = re.sub(r"^thread \(\d+\): ", "", frames[0])
            threads[name] = threads.get(name, 0) + n
            frames = frames[1:] or frames
        names = [frame_name(f) for f in frames]
        own[names[-1]] = own.get(names[-1], 0) + n
        for label, pattern in markers.items():
            if any(re.match(pattern, f) for f in names):
                inside[label] += n
    wall = seconds * rate if seconds else None
    base = wall or total or 1
    ranked = sorted(own.items(), key=lambda kv: -kv[1])[:top]
    return {"samples": total, "rate": rate, "wall_samples": round(wall) if wall else None,
            "threads": {k: {"samples": v, "share": round(v / base, 4)}
                        for k, v in sorted(threads.items(), key=lambda kv: -kv[1])[:6]},
            "top_own": [{"function": f, "samples": c, "share": round(c / base, 4)} for f, c in ranked],
            "markers": {k: {"samples": v, "share": round(v / base, 4)} for k, v in inside.items()}}  # fmt: skip
