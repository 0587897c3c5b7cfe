"""``failure_report``: a failed torchrun world's message shows the rank's own cause, not only the launcher's summary
that follows it (a summary alone names a signal and no reason)."""

from __future__ import annotations

import subprocess

from swiftcore_testing import failure_report, user_env

SUMMARY = "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n" + "  rank 0 exitcode -6\n" * 400


def test_the_first_cause_is_shown_ahead_of_a_long_launcher_summary() -> None:
    cause = 'Fatal Python error: Aborted\n\nThread 0x7f (most recent call first):\n  File "trainer.py", line 9'
    proc = subprocess.CompletedProcess(["torchrun"], -6, stdout="RUN 1/2\nDONE 1\n", stderr=f"{cause}\n{SUMMARY}")
    report = failure_report(proc)
    assert report.startswith("exit code -6")
    assert "Fatal Python error: Aborted" in report and 'File "trainer.py", line 9' in report
    assert "rank 0 exitcode -6" in report and "DONE 1" in report


def test_a_short_stderr_is_shown_once() -> None:
    proc = subprocess.CompletedProcess(["swiftcore"], 1, stdout="", stderr="Traceback (most recent call last):\nboom")
    report = failure_report(proc)
    assert report.count("boom") == 1 and "first cause" not in report


def test_children_print_their_python_stacks_when_a_signal_kills_them() -> None:
    assert user_env()["PYTHONFAULTHANDLER"] == "1"
    assert user_env(PYTHONFAULTHANDLER="0")["PYTHONFAULTHANDLER"] == "0"
