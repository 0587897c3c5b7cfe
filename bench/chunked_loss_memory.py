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

``--logps`` measures the per-token log-probs DPO and GRPO are built from instead, on the same model, one loss step
(forward, loss, backward; no optimiser) at S tokens a batch, three ways side by side: ``plain`` (the full logits, then
``log_softmax`` and a gather: TRL's ``selective_log_softmax``, what DPO/GRPO trainers did before TRL 1.16),
``trl`` (TRL 1.16's fused LM head, ``add_fused_lm_head``: tiles of 4,096 tokens x 32,768 vocabulary columns) and
``chunked`` (that forward with swiftcore-train's :func:`~swiftcore_train.loss.use_chunked_lm_head`, 1,024 tokens a
chunk, the ``--loss-chunk-size`` default). DPO: 2 rows (chosen, rejected) of S/2 tokens, the first quarter prompt;
the reference's log-probs without gradient, the sigmoid loss. GRPO: 8 completions of S/8 tokens after the prompt
quarter; old-policy and reference log-probs without gradient, the clipped ratio loss with a k3 KL term. Raw JSON goes
to ``bench/raw/chunked_logps_memory.json``; the loss values of the three are recorded (equal).
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


LOGPS_IMPLS = ("plain", "trl", "chunked")


def _logps(model: Any, impl: str, ids: Any, labels: Any) -> Any:
    """``[rows, tokens - 1]`` log-probs of each next token (0 where the label is -100), the ``impl`` way."""
    if impl == "plain":
        from trl.trainer.utils import selective_log_softmax

        logits = model(input_ids=ids).logits[:, :-1]
        return selective_log_softmax(logits, labels[:, 1:].clamp(min=0)) * (labels[:, 1:] != -100)
    return model(input_ids=ids, labels=labels, fused_lm_head=True).log_probs


def logps_child(method: str, tokens: int, impl: str) -> dict[str, Any]:
    """One DPO or GRPO loss step at ``tokens`` tokens with ``impl``'s log-probs; measured in this process."""
    import torch
    import torch.nn.functional as F
    import transformers
    from swiftcore_train.loss import use_chunked_lm_head
    from trl.trainer.utils import add_fused_lm_head

    torch.manual_seed(0)
    model = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**MODEL)).float().train()
    model.set_attn_implementation("sdpa")
    if impl != "plain":
        add_fused_lm_head(model)
    if impl == "chunked":
        use_chunked_lm_head(model, CHUNK)
    rows = 2 if method == "dpo" else 8
    width = tokens // rows
    ids = torch.randint(1, MODEL["vocab_size"], (rows, width), generator=torch.Generator().manual_seed(tokens))
    labels = ids.clone()
    labels[:, : width // 4] = -100  # the prompt
    before = _status_mb("VmRSS")
    start = time.perf_counter()
    with torch.no_grad():  # the reference (and GRPO's old policy): a slightly different model in practice
        ref = _logps(model, impl, ids, labels)
        old = ref - 0.01
    logps = _logps(model, impl, ids, labels)
    mask = (labels[:, 1:] != -100).float()
    if method == "dpo":
        ratio = ((logps - ref) * mask).sum(-1)
        loss = -F.logsigmoid(0.1 * (ratio[0] - ratio[1]))
    else:
        advantages = torch.linspace(-1, 1, rows)[:, None]
        ratio = (logps - old).exp()
        clipped = torch.minimum(ratio * advantages, ratio.clamp(0.8, 1.2) * advantages)
        kl = (ref - logps).exp() - (ref - logps) - 1
        loss = -((clipped - 0.04 * kl) * mask).sum() / mask.sum()
    loss.backward()
    seconds = time.perf_counter() - start
    peak = _status_mb("VmHWM")
    return {"method": method, "tokens": tokens, "logps": impl, "chunk_size": CHUNK if impl == "chunked" else None,
            "loss_value": loss.item(),
            "rss_before_step_mb": round(before, 1), "peak_rss_mb": round(peak, 1),
            "step_peak_mb": round(peak - before, 1), "step_seconds": round(seconds, 2)}  # fmt: skip


def run_logps(lengths: list[int], plain_max: int) -> dict[str, Any]:
    """Measure DPO and GRPO log-probs at every length, the three ways (``plain`` up to ``plain_max`` tokens: its
    full logits and their gradient need about 10 bytes x tokens x vocab x 2), each in a fresh process."""
    rows = []
    for method in ("dpo", "grpo"):
        for tokens in lengths:
            for impl in LOGPS_IMPLS:
                if impl == "plain" and tokens > plain_max:
                    continue
                out = subprocess.run([sys.executable, __file__, "--logps-child", method, str(tokens), impl],
                                     check=True, capture_output=True, text=True)  # fmt: skip
                row = json.loads(out.stdout.strip().splitlines()[-1])
                print(json.dumps(row), flush=True)
                rows.append(row)
    command = f"python bench/chunked_loss_memory.py --logps --lengths {' '.join(map(str, lengths))}"
    return {"figure": "chunked_logps_memory", "command": command, "machine": machine(), "model": MODEL,
            "dtype": "float32", "chunk_size": CHUNK, "plain_max_tokens": plain_max, "results": rows}  # fmt: skip


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
    parser.add_argument("--logps", action="store_true", help="DPO and GRPO log-probs: plain, TRL's head, chunked")
    parser.add_argument("--plain-max", type=int, default=2048, help="--logps: the longest batch the plain way runs")
    parser.add_argument("--child", type=int, nargs=2, metavar=("TOKENS", "CHUNK"), help=argparse.SUPPRESS)
    parser.add_argument("--logps-child", nargs=3, metavar=("METHOD", "TOKENS", "IMPL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return
    if args.logps_child:
        method, tokens, impl = args.logps_child
        print(json.dumps(logps_child(method, int(tokens), impl)))
        return
    if args.logps:
        data = run_logps(args.lengths, args.plain_max)
        print("\n".join(f"{r['method']:<4} {r['tokens']:>5} tokens  {r['logps']:<8} peak RSS "
                        f"{r['peak_rss_mb']:>8.1f} MB  step adds {r['step_peak_mb']:>8.1f} MB  "
                        f"loss {r['loss_value']:.6f}  {r['step_seconds']} s"
                        for r in data["results"]))  # fmt: skip
        print(f"raw: {write_raw('chunked_logps_memory', data)}")
        return
    data = run(args.lengths)
    print("\n".join(f"{r['tokens']:>5} tokens  {r['loss']:<8} peak RSS {r['peak_rss_mb']:>8.1f} MB  step adds "
                    f"{r['step_peak_mb']:>8.1f} MB  loss {r['loss_value']:.6f}  {r['step_seconds']} s"
                    for r in data["results"]))  # fmt: skip
    print(f"raw: {write_raw('chunked_loss_memory', data)}")


if __name__ == "__main__":
    main()
