"""``make bench``: set up the ms-swift peer environment, run every side-by-side figure, write RESULTS.md.

Sized to finish within 30 minutes on a fresh 2-core machine, peer set-up (about 4 minutes) included; figure 5
(DPO, ``msswift_dpo.py``, 3 x 3 runs) adds 10-20 minutes (20 on a loaded shared 2-core machine), figure 6
(the megatron engine, ``megatron_train.py``) about 4, figure 7 (sequence-parallel memory,
``sequence_parallel_memory.py``) about 10, figure 8 (text latency beside image requests, ``media_latency.py``)
about 2, figure 9 (conversion against a copy, ``convert.py``) about 1, figure 10 (online RL step time,
``rl_steps.py``) about 2, figure 11 (GRPO beside ms-swift's, ``msswift_grpo.py``, 3 rounds of 3 runs) about 6,
figure 12 (serving beside ``swift deploy`` and ``vllm serve``, ``serve_compare.py``, 3 rounds) about 14, figure 13
(scaling: encode time vs conversation length, train tokens/s vs sequence length, ``scaling.py``) about 10, figure
14 (100-step training per family, padded vs packed vs ms-swift, ``train_families.py``) about 45, figure 15 (where
template encoding's time over the bare tokenizer goes, py-spy, ``encode_profile.py``) about 3, and the SFT step's
peak RSS with the chunked loss against the plain one (``chunked_loss_memory.py``, raw JSON only) about 3, and an
Eagle3 draft's acceptance and CPU tokens/s against the target alone (``speculative.py``, raw JSON only) about 5.
Options are passed on to :func:`msswift_compare.run` (``--runs``, ``--figures``, ``--encode-n``, ...) and
:func:`msswift_dpo.run` (``--dpo-runs``, ``--dpo-pairs``); ``--figures`` without ``dpo``
skips figure 5 (its last raw JSON stays), and likewise for the other figures with a script of their own.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import chunked_loss_memory
import convert
import encode_profile
import media_latency
import megatron_recipes
import megatron_train
import msswift_compare
import msswift_dpo
import msswift_grpo
import peers
import realistic_train
import report
import rl_steps
import scaling
import sequence_parallel_memory
import serve_compare
import speculative
import train_families
from common import write_raw


def main() -> None:
    """Run the whole benchmark and print the RESULTS.md table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="alternating runs per figure (>= 5 for the issue)")
    own = ("dpo", "megatron", "sp_memory", "media", "convert", "rl", "grpo", "serve", "scaling", "families",
           "encode_profile", "chunked_loss", "speculative", "realistic", "megatron_recipes")
    parser.add_argument("--figures", default=",".join((*msswift_compare.FIGURES, *own)))
    parser.add_argument("--encode-n", type=int, default=10_000)
    parser.add_argument("--train-samples", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--infer-n", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--dpo-runs", type=int, default=3, help="alternating runs of figure 5 (DPO)")
    parser.add_argument("--dpo-pairs", type=int, default=120, help="pairs in figure 5's epoch (>= 30 steps)")
    parser.add_argument("--grpo-rounds", type=int, default=3, help="alternating rounds of figure 11 (GRPO)")
    parser.add_argument("--grpo-steps", type=int, default=6, help="steps per run of figure 11 (the first left out)")
    parser.add_argument("--serve-rounds", type=int, default=3, help="rounds of figure 12 (fresh servers each)")
    args = parser.parse_args()
    start = time.perf_counter()
    info = peers.ensure_peers()
    write_raw("peers", info)  # a reused environment keeps the set-up time measured when it was built
    how = "reused" if info.get("reused") else f"set up in {info['setup_s']} s"
    print(f"peer environment ready ({how})", flush=True)
    figures = tuple(args.figures.split(","))
    others = tuple(f for f in figures if f not in own)
    if others:  # figures 1-4 (bench/raw/msswift_compare.json)
        msswift_compare.run(others, args.runs, args.encode_n, args.train_samples, batch_size=args.batch_size,
                            infer_n=args.infer_n, max_new_tokens=args.max_new_tokens)
    if "dpo" in figures:
        msswift_dpo.run(args.dpo_runs, args.dpo_pairs, args.batch_size,
                        command=f"make bench (bench/run_all.py --dpo-runs {args.dpo_runs} --dpo-pairs {args.dpo_pairs} "
                        f"--batch-size {args.batch_size})")
    if "megatron" in figures:  # figure 6, informational (bench/raw/megatron_train.json)
        write_raw("megatron_train", megatron_train.run(3, 10))
    if "sp_memory" in figures:  # figure 7 (bench/raw/sequence_parallel_memory.json)
        write_raw("sequence_parallel_memory", sequence_parallel_memory.run(4096))
    if "media" in figures:  # figure 8 (bench/raw/media_latency.json)
        write_raw("media_latency", media_latency.run(24, 8, 448, 2))
    if "convert" in figures:  # figure 9 (bench/raw/convert.json)
        write_raw("convert", convert.run(1.0, (1, 2)))
    if "rl" in figures:  # figure 10 (bench/raw/rl_steps.json)
        write_raw("rl_steps", rl_steps.run_all(6, 1))
    if "grpo" in figures:  # figure 11 (bench/raw/msswift_grpo.json)
        msswift_grpo.run(args.grpo_rounds, args.grpo_steps,
                         command=f"make bench (bench/run_all.py --grpo-rounds {args.grpo_rounds} --grpo-steps "
                         f"{args.grpo_steps})")
    if "serve" in figures:  # figure 12 (bench/raw/serve_compare.json, bench/serve_scaling.png)
        serve_compare.run(args.serve_rounds,
                          command=f"make bench (bench/run_all.py --serve-rounds {args.serve_rounds})")
    if "scaling" in figures:  # figure 13 (bench/raw/scaling.json, bench/scaling_*.png)
        raw = scaling.run(3, train_runs=2, command="make bench (bench/run_all.py --figures scaling)")
        write_raw("scaling", raw)
        scaling.plot(raw)
        scaling.write_section(raw)
    if "families" in figures:  # figure 14 (bench/raw/train_families.json)
        with tempfile.TemporaryDirectory(prefix="swiftcore-bench-families-") as work:
            train_families.run(  # written to bench/raw/train_families.json; report.write_results renders it
                list(train_families.FAMILIES), steps=100, batch_size=2, max_length=1024, packed_length=320,
                max_turns=4, target_params=10e6, threads=1, work=Path(work),
                command="make bench (bench/run_all.py --figures families)",
            )  # fmt: skip
    if "encode_profile" in figures:  # figure 15 (bench/raw/encode_profile.json)
        with tempfile.TemporaryDirectory(prefix="swiftcore-bench-encode-profile-") as work:
            encode_profile.run(list(scaling.TEMPLATES), n=512, turns=4, seconds=8.0, work=Path(work),
                               command="make bench (bench/run_all.py --figures encode_profile)")  # fmt: skip
    if "chunked_loss" in figures:  # SFT peak RSS, chunked vs plain loss (bench/raw/chunked_loss_memory.json)
        write_raw("chunked_loss_memory", chunked_loss_memory.run([512, 2048, 4096]))
        # DPO and GRPO per-token log-probs: plain logits, TRL's fused head, the chunked head
        write_raw("chunked_logps_memory", chunked_loss_memory.run_logps([1024, 2048, 4096], 2048))
    if "realistic" in figures:  # ~145 M Qwen3.5 at realistic chat lengths (bench/raw/realistic_train.json; issue 52)
        realistic_train.main(["--quick", "--profile"])
    if "speculative" in figures:  # Eagle3 draft acceptance and CPU tokens/s (bench/raw/speculative.json)
        speculative.run(5, 40, False)
    if "megatron_recipes" in figures:  # figure 18, informational (bench/raw/megatron_recipes.json)
        write_raw("megatron_recipes", megatron_recipes.run(min(args.runs, 3), 8))
    path = report.write_results()
    print(path.read_text())
    print(f"make bench: {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
