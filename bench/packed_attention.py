"""Packed training step, transformers' masked sdpa vs swiftcore's per-sample sdpa (``swiftcore_data.packed_attention``),
and the same samples padded: forward + backward seconds of one batch, alternating run by run.

Usage: ``python bench/packed_attention.py [--family qwen3_asr] [--samples 8] [--runs 5]``. The model is a
``swiftcore make-tiny`` checkpoint of the family, widened (``--hidden``, ``--layers``) so a step does real work;
samples have mixed lengths (uniform in ``--min-len``..``--max-len``), fp32, CPU, one thread.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import alternate, machine, pair_ratio, summarize

SWIFTCORE = Path(sys.executable).parent / "swiftcore"


def _step(model: Any, batch: dict[str, Any]) -> float:
    model.zero_grad(set_to_none=True)
    start = time.perf_counter()
    model(**batch).loss.backward()
    return time.perf_counter() - start


def run(family: str, samples: int, runs: int, min_len: int, max_len: int) -> dict[str, Any]:
    """Time the three ways of one batch; return the raw numbers and ratios."""
    import torch
    from swiftcore_data import PACKED_SDPA, PaddingCollator, PaddingFreeCollator, use_packed_attention

    from swiftcore._plugins import load_plugins
    from swiftcore.models import load_model

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([str(SWIFTCORE), "make-tiny", family, tmp, "--force"], check=True, capture_output=True)
        plugins = load_plugins(env={})
        spec = plugins.registry.get("model", family)
        masked = load_model(spec, tmp, plugins, torch_dtype="float32").train()
        per_sample = load_model(spec, tmp, plugins, torch_dtype="float32").train()
        assert use_packed_attention(per_sample), f"{family}: not on sdpa"
    vocab = masked.get_input_embeddings().num_embeddings
    rng = random.Random(0)
    rows = [[rng.randrange(vocab) for _ in range(rng.randint(min_len, max_len))] for _ in range(samples)]
    data = [{"input_ids": ids, "labels": ids} for ids in rows]
    packed = {k: v for k, v in PaddingFreeCollator()(data).items() if k != "seq_lens"}
    padded = PaddingCollator(pad_token_id=0)(data)
    times = alternate(runs, {"padded (sdpa)": lambda: _step(masked, padded),
                             "packed, masked sdpa": lambda: _step(masked, packed),
                             f"packed, {PACKED_SDPA}": lambda: _step(per_sample, packed)})  # fmt: skip
    real = sum(len(r) for r in rows)
    return {"machine": machine(), "family": family, "samples": samples, "lengths": [min_len, max_len],
            "real_tokens": real, "padded_tokens": samples * max(len(r) for r in rows),
            "seconds": {k: summarize(v) for k, v in times.items()},
            "speedup_vs_padded": pair_ratio(times["padded (sdpa)"], times[f"packed, {PACKED_SDPA}"]),
            "speedup_vs_masked": pair_ratio(times["packed, masked sdpa"], times[f"packed, {PACKED_SDPA}"])}  # fmt: skip


def main() -> None:
    """Print the raw result as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="qwen3_asr")
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--min-len", type=int, default=64)
    parser.add_argument("--max-len", type=int, default=1024)
    args = parser.parse_args()
    print(json.dumps(run(args.family, args.samples, args.runs, args.min_len, args.max_len), indent=1))


if __name__ == "__main__":
    main()
