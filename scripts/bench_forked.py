"""The same ``swiftcore`` commands run as subprocesses and forked from swiftcore_testing's fork server, alternately.

    .venv/bin/python scripts/bench_forked.py [--rounds 2]

A tiny Qwen3.5 is made in a temporary folder; each round runs ``train`` (2 LoRA steps), ``export --merge-lora`` and
``infer`` once as a subprocess and once forked (``swiftcore_testing.run_swiftcore``), and prints each one's seconds:
what a test that runs these commands pays for each (docs/testing.md quotes a run).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _commands(root: Path, tag: str) -> list[list[str]]:
    out = root / tag
    return [
        ["train", "--model", str(root / "tiny"), "--dataset", str(root / "data.jsonl"), "--tuner", "lora",
         "--max-steps", "2", "--batch-size", "2", "--save-steps", "2", "--output-dir", str(out), "--no-plot"],
        ["export", "--model", str(out / "checkpoint-2"), "--merge-lora", str(out / "merged")],
        ["infer", "--model", str(out / "merged"), "--input", str(root / "questions.jsonl"), "--output",
         str(out / "answers.jsonl"), "--max-new-tokens", "2"],
    ]  # fmt: skip


def main() -> None:
    """Print each command's seconds, subprocess against forked, round by round."""
    from swiftcore_testing import run_swiftcore

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    rounds = parser.parse_args().rounds
    swiftcore = str(Path(sys.executable).with_name("swiftcore"))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory(prefix="bench-forked-") as folder:
        root = Path(folder)
        tiny = [swiftcore, "make-tiny", "qwen3_5", str(root / "tiny")]
        subprocess.run(tiny, env=env, check=True, capture_output=True)
        rows = [
            {"messages": [{"role": "user", "content": f"Is {n} even?"}, {"role": "assistant", "content": "yes"}]}
            for n in range(0, 16, 2)
        ]
        (root / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (root / "questions.jsonl").write_text(json.dumps({"messages": rows[0]["messages"][:1]}) + "\n")
        start = time.perf_counter()
        run_swiftcore("--help", env=env)
        print(f"fork server started (imports once) and --help: {time.perf_counter() - start:.1f} s")
        for number in range(rounds):
            for mode in ("subprocess", "forked"):
                for command in _commands(root, f"{mode}-{number}"):
                    start = time.perf_counter()
                    if mode == "subprocess":
                        done = subprocess.run([swiftcore, *command], env=env, capture_output=True, text=True)
                    else:
                        done = run_swiftcore(*command, env=env)
                    assert done.returncode == 0, done.stderr[-2000:]
                    print(f"round {number} {mode:10} {command[0]:7} {time.perf_counter() - start:5.1f} s")


if __name__ == "__main__":
    main()
