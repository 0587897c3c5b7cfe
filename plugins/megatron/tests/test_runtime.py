"""``init_model_parallel`` in one long-lived process (the test session, a notebook) does not leak gloo groups."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

_SCRIPT = textwrap.dedent(
    """
    import os, time
    from swiftcore_megatron.runtime import init_model_parallel

    def threads():
        return len(os.listdir("/proc/self/task"))

    init_model_parallel(1, 1)
    first = threads()
    for _ in range(6):
        init_model_parallel(1, 1)
    init_model_parallel(1, 1, seed=7)
    print(first, threads())
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts threads in /proc")
def test_reinitialising_keeps_one_set_of_gloo_threads() -> None:
    """Before the fix each call left ~50 more gloo polling threads behind (a session reached thousands, burning a
    core between tests); now a re-initialised process holds what the first call made."""
    proc = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    first, last = map(int, proc.stdout.split()[-2:])
    assert last <= first + 4, f"threads grew from {first} to {last} over 7 re-initialisations"
