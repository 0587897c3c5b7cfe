"""Figure 7: activation memory per rank under sequence parallelism, and the longest sequence a budget trains.

One SP group of 2 gloo ranks (``torch.multiprocessing``) against one process, on a small random Qwen3 (GQA)
trained in full: forward of a padding-free row of ``S`` tokens, the causal-LM loss, all in float32.

Activation memory = the bytes autograd keeps for the backward at the end of the forward: every tensor the
graph saved (``torch.autograd.graph.saved_tensors_hooks``), each storage counted once, the parameters left
out. That is what grows with the sequence; the weights, gradients and optimiser state do not (and SP does not
split them). The budget is SP=1's activation memory at ``--budget-tokens``; for each series the longest
sequence within it is found by bisection on multiples of 256 tokens, measuring every probe (per rank: the
largest of the ranks). Peak RSS is not reported: the spawned ranks inherit their parent's high-water mark
across ``exec`` on Linux, and allocator caching would blur it anyway.

Usage: ``python bench/sequence_parallel_memory.py [--budget-tokens 4096]``; raw JSON goes to
``bench/raw/sequence_parallel_memory.json`` and the figure replaces the ``sequence-parallel`` section of
RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from common import machine, machine_text, replace_section, write_raw

BEGIN, END = "<!-- sequence-parallel-memory:begin -->", "<!-- sequence-parallel-memory:end -->"
#: The model: Qwen3 shapes scaled down (GQA 8 query / 4 key-value heads), 2 layers, random weights.
MODEL = {"vocab_size": 2048, "hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 2,
         "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 32,
         "max_position_embeddings": 65536}  # fmt: skip
#: name: (ranks, SP mode); None = transformers' own sdpa attention, no SP code at all.
SERIES = {"sdpa": (1, None), "sp1": (1, "ulysses"), "sp2_ulysses": (2, "ulysses"), "sp2_ring": (2, "ring")}
STEP = 256


def _model() -> Any:
    import torch
    import transformers

    torch.manual_seed(0)
    model = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**MODEL)).float()
    model.set_attn_implementation("sdpa")
    return model.train()


def _batch(tokens: int) -> dict[str, Any]:
    """One padding-free row: samples of 1024 tokens (the last one shorter), position ids restarting at 0."""
    import torch

    gen = torch.Generator().manual_seed(tokens)
    ids = torch.randint(1, MODEL["vocab_size"], (1, tokens), generator=gen)
    pos = torch.arange(tokens).remainder(1024).unsqueeze(0)
    return {"input_ids": ids, "position_ids": pos, "labels": ids.masked_fill(pos == 0, -100)}


def activation_bytes(model: Any, forward: Any) -> int:
    """Bytes of the tensors autograd saved while ``forward()`` ran (unique storages, parameters excluded)."""
    import torch

    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: Any) -> Any:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = forward()
    del loss
    return sum(seen.values())


def _measure_one_process(model: Any, tokens: int) -> int:
    batch = _batch(tokens)
    return activation_bytes(model, lambda: model(**batch, use_cache=False).loss)


def _measure_sp(model: Any, tokens: int, state: Any) -> int:
    from swiftcore_sequence_parallel.loss import sequence_parallel_loss
    from swiftcore_sequence_parallel.sharding import shard_batch

    shard = shard_batch(_batch(tokens), state.rank, state.size)
    labels = shard.pop("shift_labels")
    return activation_bytes(model, lambda: sequence_parallel_loss(model(**shard, use_cache=False).logits, labels))


def _longest(measure: Any, budget: int, low: int, high: int) -> tuple[int, list[tuple[int, int]]]:
    """Largest multiple of STEP in [low, high] whose measure fits ``budget`` (measure(low) must fit)."""
    probes = []
    while high - low > STEP:
        mid = (low + high) // 2 // STEP * STEP
        used = measure(mid)
        probes.append((mid, used))
        low, high = (mid, high) if used <= budget else (low, mid)
    return low, probes


def _worker(rank: int, ranks: int, port: int, mode: str, budget: int, low: int, high: int, out: str) -> None:
    import torch
    import torch.distributed as dist
    from swiftcore_sequence_parallel.attention import enable_sequence_parallel
    from swiftcore_sequence_parallel.groups import init_sequence_parallel

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=ranks)
    try:
        state = init_sequence_parallel(ranks, mode)
        model = enable_sequence_parallel(_model(), state)

        def measure(tokens: int) -> int:  # the largest rank's, so every rank takes the same decision
            used = torch.tensor([_measure_sp(model, tokens, state)])
            dist.all_reduce(used, op=dist.ReduceOp.MAX)
            return int(used)

        at_low = measure(low)
        longest, probes = _longest(measure, budget, low, high) if at_low <= budget else (0, [])
        if rank == 0:
            torch.save({"longest": longest, "probes": [(low, at_low), *probes]}, out)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def run(budget_tokens: int) -> dict[str, Any]:
    """The budget (one process, transformers' sdpa, ``budget_tokens``), then every series' longest sequence."""
    import torch
    import torch.multiprocessing as mp
    from swiftcore_sequence_parallel.testing import free_port

    torch.set_num_threads(1)
    start = time.perf_counter()
    model = _model()
    budget = _measure_one_process(model, budget_tokens)
    high = 4 * budget_tokens
    longest, probes = _longest(lambda t: _measure_one_process(model, t), budget, budget_tokens, high)
    sdpa = {"longest": longest, "probes": [(budget_tokens, budget), *probes]}
    series: dict[str, Any] = {"sdpa": sdpa}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (ranks, mode) in SERIES.items():
            if mode is None:
                continue
            out = str(Path(tmp) / f"{name}.pt")
            args = (ranks, free_port(), mode, budget, budget_tokens, high, out)
            mp.spawn(_worker, args=args, nprocs=ranks, join=True)
            series[name] = torch.load(out, weights_only=False)
            print(f"{name}: longest {series[name]['longest']} tokens", flush=True)
    return {"machine": machine(), "model": MODEL, "budget_tokens": budget_tokens, "budget_bytes": budget,
            "seconds": round(time.perf_counter() - start, 1), "series": series}  # fmt: skip


def render(raw: dict[str, Any]) -> str:
    """The Markdown section of figure 7."""
    names = {"sdpa": "one process, transformers' sdpa (no SP code)",
             "sp1": "one process, the SP attention kernel (SP=1)",
             "sp2_ulysses": "SP=2, Ulysses (2 gloo ranks)", "sp2_ring": "SP=2, ring p2p (2 gloo ranks)"}  # fmt: skip
    model, series = raw["model"], raw["series"]
    one, sdpa = series["sp1"]["longest"], series["sdpa"]["longest"]
    lines = [BEGIN, "", "## 7. Sequence parallel: the longest sequence in a fixed activation budget", "",
             f"`bench/sequence_parallel_memory.py`, {raw['machine']['date']}, {machine_text(raw['machine'])}, "
             f"{raw['seconds']:.0f} s: random Qwen3 "
             f"(hidden {model['hidden_size']}, {model['num_hidden_layers']} layers, {model['num_attention_heads']} "
             f"query / {model['num_key_value_heads']} key-value heads, vocab {model['vocab_size']}), float32, one "
             "padding-free row of 1024-token samples, causal-LM loss. Activation memory = the tensors autograd keeps "
             "for the backward at the end of the forward (unique storages, parameters excluded), per rank (the "
             f"largest rank). Budget: one process with transformers' sdpa at {raw['budget_tokens']} tokens, "
             f"{raw['budget_bytes'] / 2**20:.1f} MiB. Longest sequence within it found by bisection on multiples of "
             f"{STEP} tokens, every probe measured.", "",
             "| series | longest sequence in the budget (tokens) | vs SP=1, same kernel | vs transformers' sdpa | "
             "probes (tokens: MiB per rank) |", "| --- | --- | --- | --- | --- |"]  # fmt: skip
    for name, result in series.items():
        probes = ", ".join(f"{t}: {b / 2**20:.1f}" for t, b in sorted(result["probes"]))
        lines.append(f"| {names[name]} | {result['longest']} | {result['longest'] / one:.2f}x | "
                     f"{result['longest'] / sdpa:.2f}x | {probes} |")  # fmt: skip
    worst = min(series[n]["longest"] for n in ("sp2_ulysses", "sp2_ring")) / one
    verdict = "met" if worst >= 1.8 else "NOT met"
    lines += [
        "",
        f"Target (issue 21): SP=2 trains at least 1.8x the sequence of SP=1 in the same per-rank budget: {verdict} "
        f"({worst:.2f}x for the weaker mode, like for like: the same attention kernel on one rank). Against "
        "transformers' own sdpa the gain is larger because torch's CPU sdpa, given a mask (packed samples), keeps it "
        "as a float32 `S x S` tensor in every layer, which grows quadratically; the SP kernel "
        "(`kernels.low_memory_attention`) rebuilds mask and scores block by block and keeps only q, k, v, the "
        "output and the log-sum-exp. On a GPU, flash-attention's kernels avoid that quadratic term too.",
        "",
        END,
    ]
    return "\n".join(lines)


def write_section(raw: dict[str, Any]) -> Path:
    """Replace (or append) figure 7's section of RESULTS.md."""
    return replace_section(render(raw), BEGIN, END)


def main() -> None:
    """Run figure 7 and write its raw JSON and RESULTS.md section."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-tokens", type=int, default=4096)
    args = parser.parse_args()
    raw = run(args.budget_tokens)
    write_raw("sequence_parallel_memory", raw)
    print(write_section(raw))


if __name__ == "__main__":
    main()
