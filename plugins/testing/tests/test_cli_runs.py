"""``swiftcore_testing.cli_runs``'s step kinds in one real process (no torch): a ``may_fail`` step that fails is
reported and the next steps still run, one that succeeds leaves no failure file, a ``script`` step runs its file as
``__main__`` with its ``argv``, and an ordinary step that fails still ends the script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from swiftcore_testing import failure_report, user_env


def test_may_fail_and_script_steps_run_in_one_process(tmp_path: Path) -> None:
    seen = tmp_path / "seen.json"
    record = tmp_path / "record.py"
    record.write_text(
        "import json, sys\nfrom pathlib import Path\n"
        "Path(sys.argv[1]).write_text(json.dumps({'name': __name__, 'argv': sys.argv[1:]}))\n"
    )
    (tmp_path / "raises.py").write_text("raise ValueError('the script refuses: bad --flag')\n")
    (tmp_path / "exits.py").write_text("import sys\nsys.exit(3)\n")
    fails, raised, succeeded = tmp_path / "fails.txt", tmp_path / "raised.txt", tmp_path / "succeeded.txt"
    succeeded.write_text("left from an earlier run")
    steps = [
        {"args": ["no-such-command"], "may_fail": True, "output": str(fails)},  # 1: click refuses it (exit 2)
        {"script": str(record), "argv": [str(seen), "two"]},  # 2: still runs
        {"script": str(tmp_path / "raises.py"), "may_fail": True, "output": str(raised)},  # 3: an exception
        {"args": ["--help"], "may_fail": True, "output": str(succeeded)},  # 4: succeeds: no failure file
        {"script": str(tmp_path / "exits.py"), "argv": []},  # 5: an ordinary failure ends the script
        ["--help"],  # 6: never runs
    ]
    runs = tmp_path / "runs.json"
    runs.write_text(json.dumps(steps))
    done = subprocess.run(
        [sys.executable, "-m", "swiftcore_testing.cli_runs", str(runs)],
        env=user_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    report = failure_report(done)
    assert done.returncode == 3, report
    finished = [line for line in done.stdout.splitlines() if line.startswith(("DONE", "EXPECTED-FAILURE"))]
    assert finished == ["EXPECTED-FAILURE 1", "DONE 1", "DONE 2", "EXPECTED-FAILURE 3", "DONE 3", "DONE 4"], report
    assert "FAILED 1 (rank 0): exit code 2" in done.stderr, report
    assert "FAILED 5 (rank 0): exit code 3" in done.stdout, report
    assert "RUN 6/6" not in done.stdout, report
    assert fails.read_text().startswith("exit code 2\n") and "no-such-command" in fails.read_text(), fails.read_text()
    assert raised.read_text().startswith("ValueError: the script refuses: bad --flag"), raised.read_text()
    assert not succeeded.exists()
    assert json.loads(seen.read_text()) == {"name": "__main__", "argv": [str(seen), "two"]}
