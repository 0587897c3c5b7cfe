"""Peak memory of one SFT training step with the chunked loss (``--loss-chunk-size``) against the plain loss.

A Qwen3 with Qwen's real vocabulary (151,936 tokens, tied embeddings) and a tiny body (1 layer, hidden 128), so
the full-vocabulary logits dominate as they do at real scale; one padding-free row of S tokens, every token but the
first supervised; float32 on the CPU. One step = forward, loss, backward, AdamW step, exactly what swiftcore's
trainer runs: the plain loss is :func:`swiftcore_train.loss.causal_lm_loss` on the model's full logits, the chunked
one :class:`swiftcore_train.loss.ChunkedCausalLMLoss` (chunks of 1024 supervised tokens, the default; full training,
so its fused path) on its last hidden state. Step seconds are recorded too, on a shared machine: indicative only.

Each (S, loss) runs in its own fresh process, one at a time, which reports its own high-water mark (``VmHWM`` of
``/proc/self/status``: a fresh address space's peak, nothing inherited) and its resident memory right before the
step, so ``step_peak_mb`` is what the step itself added. The loss values of both are recorded: they are equal.

Usage: ``python bench/chunked_loss_memory.py [--lengths 512 2048 4096]``; raw JSON goes to
``bench/raw/chunked_loss_memory.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import machine, write_raw

#: Qwen3 with Qwen's vocabulary and a tiny body: the lm_head is 151,936 x 128.
MODEL = {"vocab_size": 151936, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 1,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "tie_word_embeddings": True,
         "max_position_embeddings": 8192}  # fmt: skip
CHUNK = 1024


def _status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def child(tokens: int, chunk: int) -> dict[str, Any]:
    """One training step at ``tokens`` tokens, chunked (``chunk`` > 0) or plain (0); measured in this process."""
    import torch
    import transformers
    from swiftcore_train.loss import ChunkedCausalLMLoss, causal_lm_loss

    torch.manual_seed(0)
    model = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**MODEL)).float().train()
    model.set_attn_implementation("sdpa")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(1, MODEL["vocab_size"], (1, tokens), generator=torch.Generator().manual_seed(tokens))
    labels = ids.clone()
    labels[0, 0] = -100
    count = torch.tensor(tokens - 1)
    before = _status_mb("VmRSS")
    start = time.perf_counter()
    if chunk:
        loss_fn = ChunkedCausalLMLoss(model.get_output_embeddings(), chunk)
        loss = loss_fn(model(input_ids=ids, **loss_fn.forward_kwargs), labels, count)
    else:
        loss = causal_lm_loss(model(input_ids=ids), labels, count)
    loss.backward()
    optimizer.step()
    seconds = time.perf_counter() - start
    peak = _status_mb("VmHWM")
    return {"tokens": tokens, "loss": "chunked" if chunk else "plain", "chunk_size": chunk or None,
            "loss_value": loss.item(), "rss_before_step_mb": round(before, 1), "peak_rss_mb": round(peak, 1),
            "step_peak_mb": round(peak - before, 1), "step_seconds": round(seconds, 2)}  # fmt: skip


def run(lengths: list[int]) -> dict[str, Any]:
    """Measure every length, plain then chunked, each in a fresh process; return the raw results."""
    rows = []
    for tokens in lengths:
        for chunk in (0, CHUNK):
            out = subprocess.run([sys.executable, __file__, "--child", str(tokens), str(chunk)], check=True,
                                 capture_output=True, text=True)  # fmt: skip
            row = json.loads(out.stdout.strip().splitlines()[-1])
            print(json.dumps(row), flush=True)
            rows.append(row)
    return {"figure": "chunked_loss_memory", "machine": machine(), "model": MODEL, "dtype": "float32",
            "results": rows}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 2048, 4096])
    parser.add_argument("--child", type=int, nargs=2, metavar=("TOKENS", "CHUNK"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return
    data = run(args.lengths)
    print("\n".join(f"{r['tokens']:>5} tokens  {r['loss']:<8} peak RSS {r['peak_rss_mb']:>8.1f} MB  step adds "
                    f"{r['step_peak_mb']:>8.1f} MB  loss {r['loss_value']:.6f}  {r['step_seconds']} s"
                    for r in data["results"]))  # fmt: skip
    print(f"raw: {write_raw('chunked_loss_memory', data)}")


if __name__ == "__main__":
    main()
