"""``make bench``: set up the ms-swift peer environment, run every side-by-side figure, write RESULTS.md.

Sized to finish within 30 minutes on a fresh 2-core machine, peer set-up (about 4 minutes) included.
Options are passed on to :func:`msswift_compare.run` (``--runs``, ``--figures``, ``--encode-n``, ...).
"""

from __future__ import annotations

import argparse
import time

import msswift_compare
import peers
import report
from common import write_raw


def main() -> None:
    """Run the whole benchmark and print the RESULTS.md table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="alternating runs per figure (>= 5 for the issue)")
    parser.add_argument("--figures", default=",".join(msswift_compare.FIGURES))
    parser.add_argument("--encode-n", type=int, default=10_000)
    parser.add_argument("--train-samples", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--infer-n", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    args = parser.parse_args()
    start = time.perf_counter()
    info = peers.ensure_peers()
    write_raw("peers", info)  # a reused environment keeps the set-up time measured when it was built
    how = "reused" if info.get("reused") else f"set up in {info['setup_s']} s"
    print(f"peer environment ready ({how})", flush=True)
    msswift_compare.run(tuple(args.figures.split(",")), args.runs, args.encode_n, args.train_samples,
                        batch_size=args.batch_size, infer_n=args.infer_n, max_new_tokens=args.max_new_tokens)
    path = report.write_results()
    print(path.read_text())
    print(f"make bench: {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
