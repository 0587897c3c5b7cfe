"""Benchmark: wall time of `swiftcore --help` and `swiftcore plugins` (cold processes, median of N).

Run by hand (`.venv/bin/python bench/cli_startup.py [--runs 20]`); prints a table and writes JSON to
bench/raw/cli_startup.json. Not a test: shared machines are noisy, so figures go into notes and docs.
If ms-swift's `swift` is found (e.g. in .venv-peers/bin, created by the ms-swift comparison), it is
timed in the same run, alternating with swiftcore run by run so machine drift cancels.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def time_command(argv: list[str]) -> float:
    """Seconds of wall time for one run of ``argv`` (output discarded; a failure is an error).

    ms-swift 4.6.0's ``swift --help`` always exits 1 (``KeyError: '--help'`` after loading its routes), so
    its exit status is not checked: the wait is what a user gets either way.
    """
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=Path(argv[0]).name != "swift")
    return time.perf_counter() - start


def main() -> None:
    """Time each command ``--runs`` times, interleaved, and report medians."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    swiftcore = str(Path(sys.executable).parent / "swiftcore")
    commands = {
        "swiftcore --help": [swiftcore, "--help"],
        "swiftcore plugins": [swiftcore, "plugins"],
        "swiftcore plugins --json": [swiftcore, "plugins", "--json"],
    }
    swift = shutil.which("swift", path=str(ROOT / ".venv-peers" / "bin"))
    if swift:
        commands["swift --help (ms-swift)"] = [swift, "--help"]
    for argv in commands.values():  # warm the page cache once
        time_command(argv)
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(args.runs):
        for name, argv in commands.items():
            samples[name].append(time_command(argv))
    result = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} {platform.processor() or ''} python {platform.python_version()}",
        "runs": args.runs,
        "median_s": {name: round(statistics.median(v), 4) for name, v in samples.items()},
        "max_s": {name: round(max(v), 4) for name, v in samples.items()},
    }
    out = ROOT / "bench" / "raw" / "cli_startup.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"{'command':32} {'median s':>9} {'max s':>7}")
    for name in commands:
        print(f"{name:32} {result['median_s'][name]:9.3f} {result['max_s'][name]:7.3f}")


if __name__ == "__main__":
    main()
