"""GPU check of swiftcore's own code paths on a CUDA machine (no network needed; not part of the CPU suite).

Run by ``scripts/gpu_check_core.sh``. Each check prints one JSON line and the script exits non-zero when
any fails:

1. ``train_bf16``: ``swiftcore train`` (LoRA, bf16) on a tiny Qwen3.5 runs on the GPU (CUDA memory is
   used), losses are finite and fall; tokens/s is reported.
2. ``infer_cuda_vs_cpu``: the transformers backend's greedy output on the GPU equals the CPU's, token for
   token, for the checkpoint trained in 1 (float32).
3. ``megatron_parity_cuda``: ``swiftcore export --to-mcore --check-parity`` on a tiny Qwen3 runs the real
   megatron-core GPTModel on the GPU; max |logit diff| <= 1e-5 and identical argmax.
4. ``megatron_train_cuda``: ``swiftcore train --engine megatron`` (one rank, NCCL) on the tiny Qwen3.5 of 1 runs
   on the GPU; its first 5 losses equal the transformers engine's on the GPU to 1e-3 relative; tokens/s and
   peak memory are reported. On a machine with 2 GPUs or more, the same at ``--pp 2`` (two NCCL ranks under
   torchrun, megatron-core's 1F1B schedule); with one GPU that part reports itself skipped.
5. ``sp_attention_cuda``: the sequence-parallel plugin's low-memory attention (the kernel every SP mode runs)
   on the GPU equals the CPU's (output, log-sum-exp, gradients; packed samples, sliding window, GQA) to 1e-4,
   and the CUDA memory its forward keeps at 8192 tokens is at most half of sdpa's with the same mask.
6. ``packed_cuda``: ``tests/test_packing_exact.py`` on CUDA (``SWIFTCORE_TEST_DEVICE=cuda``, TF32 off): packed rows give
   the unpacked losses and gradients for every family, through Qwen3.5's DeltaNet patch on its accelerator path (one
   right-padded batch of the samples) and the trainer's packed attention on CUDA's sdpa kernels; the negative
   controls still leak without the hooks.
7. ``rl_rollouts_cuda``: recipe-rl's rollout-engine and rollout-server tests on a CUDA machine, where TRL puts the
   policy on the GPU and the colocated engine (``--rollout-engine transformers``) and ``swiftcore rollout`` take the
   GPU too: after every LoRA and full sync the engine's greedy tokens equal the policy's, the dead-server resume.
   Needs TRL and its dependencies (carried wheels); without them the check reports itself skipped.

``scripts/gpu_check_core.sh NAME ...`` runs only the named checks (``train_and_infer``, ``megatron``,
``megatron_training``, ``sp_attention``, ``packed``, ``rl_rollouts``; 4 needs 1's model and data).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
RESULTS: list[dict] = []


def report(name: str, ok: bool, **details: object) -> None:
    """Print and remember one check's outcome."""
    row = {"check": name, "ok": bool(ok), **details}
    RESULTS.append(row)
    print(json.dumps(row), flush=True)


def check_train_and_infer(work: Path) -> None:
    """Checks 1 and 2."""
    import torch
    from swiftcore_infer.transformers_engine import TransformersEngine
    from swiftcore_tiny import make_tiny
    from swiftcore_train.config import TrainConfig
    from swiftcore_train.dispatch import run_training

    from swiftcore import load_plugins

    plugins = load_plugins(env={})
    model_dir = make_tiny(plugins.registry.get("model", "qwen3_5"), work / "tiny", seed=0)
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"Is {n} even or odd?"},
                {"role": "assistant", "content": "even" if n % 2 == 0 else "odd"},
            ]
        }
        for n in range(200, 520)
    ]
    data = work / "parity.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    result = run_training(
        TrainConfig(
            model=str(model_dir),
            dataset=(str(data),),
            output_dir=str(work / "run"),
            tuner="lora",
            dtype="bfloat16",
            max_steps=60,
            batch_size=16,
            learning_rate=1e-2,
            logging_steps=10,
            save_steps=60,
            max_length=64,
            seed=0,
            plot=False,
        ),
        plugins,
    )
    seconds = time.perf_counter() - start
    logs = [json.loads(line) for line in result.log_file.read_text().splitlines()]
    losses = [r["loss"] for r in logs if "loss" in r]
    tokens_per_s = [r["tokens_per_second"] for r in logs if "tokens_per_second" in r]
    peak = torch.cuda.max_memory_allocated()
    report(
        "train_bf16",
        peak > 0 and all(map(lambda x: x == x, losses)) and losses[-1] < losses[0],
        losses=losses,
        peak_cuda_bytes=peak,
        seconds=round(seconds, 1),
        tokens_per_second=tokens_per_s[-1] if tokens_per_s else None,
        device=torch.cuda.get_device_name(),
    )

    questions = [{"messages": r["messages"][:1]} for r in rows[:16]]
    outputs = {}
    for device in ("cuda", "cpu"):
        engine = TransformersEngine(result.last_checkpoint, plugins, device=device)
        outputs[device] = [g.token_ids for g in engine.generate(questions, max_new_tokens=8)]
    same = outputs["cuda"] == outputs["cpu"]
    report(
        "infer_cuda_vs_cpu",
        same,
        prompts=len(questions),
        differing=[i for i, (a, b) in enumerate(zip(outputs["cuda"], outputs["cpu"])) if a != b],
    )


def check_megatron(work: Path) -> None:
    """Check 3."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        tie_word_embeddings=False,
    )
    hf_dir = work / "qwen3"
    Qwen3ForCausalLM(config).save_pretrained(hf_dir)
    swiftcore = str(Path(sys.executable).parent / "swiftcore")
    cmd = [swiftcore, "export", "--model", str(hf_dir), "--to-mcore", str(work / "mcore"), "--check-parity"]
    if not Path(swiftcore).exists():
        cmd = [sys.executable, "-m", "swiftcore.cli.main", *cmd[1:]]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    report("megatron_parity_cuda", proc.returncode == 0, output=(proc.stdout + proc.stderr)[-1500:])


def check_megatron_training(work: Path) -> None:
    """Check 4 (needs the tiny model and data of check 1)."""
    swiftcore = str(Path(sys.executable).parent / "swiftcore")
    base = [swiftcore] if Path(swiftcore).exists() else [sys.executable, "-m", "swiftcore.cli.main"]
    common = ["train", "--model", str(work / "tiny"), "--dataset", str(work / "parity.jsonl"), "--tuner", "full",
              "--max-steps", "5", "--logging-steps", "1", "--batch-size", "4", "--learning-rate", "5e-4",
              "--no-plot"]  # fmt: skip
    import torch

    torchrun = [str(Path(sys.executable).parent / "torchrun"), "--nproc-per-node", "2"]
    runs = {"transformers": [*base, *common], "megatron": [*base, *common, "--engine", "megatron"]}
    if torch.cuda.device_count() >= 2:  # NCCL refuses two ranks on one GPU
        runs["megatron_pp2"] = [*torchrun, *runs["megatron"], "--pp", "2"]
    losses, outputs, speed, memory = {}, {}, {}, {}
    for name, command in runs.items():
        out = work / f"engine-{name}"
        proc = subprocess.run([*command, "--output-dir", str(out)], capture_output=True, text=True, timeout=900)
        outputs[name] = (proc.stdout + proc.stderr)[-1500:]
        log = (out / "logs.jsonl").read_text().splitlines() if proc.returncode == 0 else []
        rows = [json.loads(line) for line in log]
        losses[name] = [r["loss"] for r in rows if "loss" in r]
        speed[name] = next((r["tokens_per_second"] for r in reversed(rows) if "tokens_per_second" in r), None)
        memory[name] = next((r["peak_gpu_mb"] for r in rows if "peak_gpu_mb" in r), None)
    for name in ("megatron", "megatron_pp2"):
        if name not in runs:
            report(f"{name.replace('megatron', 'megatron_train')}_cuda", True, skipped="needs 2 GPUs")
            continue
        pairs = list(zip(losses["transformers"], losses[name]))
        worst = max((abs(a - b) / abs(a) for a, b in pairs), default=float("inf"))
        report(f"{name.replace('megatron', 'megatron_train')}_cuda", len(pairs) == 5 and worst < 1e-3,
               worst_relative=worst, losses={k: losses[k] for k in ("transformers", name)},
               tokens_per_second={k: speed[k] for k in ("transformers", name)}, peak_gpu_mb_per_rank=memory[name],
               output=outputs[name] if len(pairs) < 5 else "")  # fmt: skip


def check_sp_attention(work: Path) -> None:
    """Check 5 (``work`` unused)."""
    import torch
    from swiftcore_sequence_parallel.kernels import KeyLayout, dense_attention, low_memory_attention
    from swiftcore_sequence_parallel.masks import segment_ids

    def run(device: str, n: int) -> tuple:
        gen = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(1, h, n, 64, generator=gen).to(device).requires_grad_() for h in (8, 4, 4))
        pos = torch.arange(n).remainder(n // 3 + 1).unsqueeze(0)  # three packed samples
        idx = torch.arange(n, device=device)
        layout = KeyLayout(idx, idx, segment_ids(pos).to(device), None, True, n // 4)
        out, lse = low_memory_attention(q, k, v, layout, scale=0.125)
        grads = torch.autograd.grad(out.square().sum() + lse.sum(), (q, k, v))
        return layout, [t.detach().cpu() for t in (out, lse, *grads)]

    _, cpu = run("cpu", 1024)
    _, cuda = run("cuda", 1024)
    worst = max(float((a - b).abs().max()) for a, b in zip(cpu, cuda))
    n = 8192
    q, k, v = (torch.randn(1, h, n, 64, device="cuda", requires_grad=True) for h in (8, 4, 4))
    idx = torch.arange(n, device="cuda")
    layout = KeyLayout(idx, idx, torch.zeros(1, n, dtype=torch.long, device="cuda"), None, True, None)
    kept = {}
    for name, fn in (("low_memory", lambda: low_memory_attention(q, k, v, layout, scale=0.125)[0]),
                     ("sdpa_mask", lambda: dense_attention(q, k, v, layout.mask(0, n), scale=0.125))):  # fmt: skip
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        out = fn()
        torch.cuda.synchronize()
        kept[name] = (torch.cuda.memory_allocated() - before) / 2**20
        del out
    report("sp_attention_cuda", worst < 1e-4 and kept["low_memory"] <= kept["sdpa_mask"] / 2, worst_abs_diff=worst,
           kept_mib=kept)  # fmt: skip


def check_packed(work: Path) -> None:
    """Check 6 (``work`` unused): the packing exactness tests, run by pytest on CUDA."""
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "SWIFTCORE_TEST_DEVICE": "cuda"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_packing_exact.py"]
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=900)
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    report("packed_cuda", proc.returncode == 0, summary=lines[-1] if lines else "",
           output="\n".join(lines[-40:]) if proc.returncode else "")  # fmt: skip


def check_rl_rollouts(work: Path) -> None:
    """Check 7 (``work`` unused): recipe-rl's rollout tests, run by pytest with the GPU visible."""
    import importlib.util

    if importlib.util.find_spec("trl") is None:
        report("rl_rollouts_cuda", True, skipped="trl is not installed (carry trl, datasets and their wheels)")
        return
    root = Path(__file__).resolve().parent.parent
    tests = ["plugins/recipe_rl/tests/test_rollout_engine.py", "plugins/recipe_rl/tests/test_rollout_server.py"]
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests]
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=900)
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    report("rl_rollouts_cuda", proc.returncode == 0, summary=lines[-1] if lines else "",
           output="\n".join(lines[-60:]) if proc.returncode else "")  # fmt: skip


CHECKS = (check_train_and_infer, check_megatron, check_megatron_training, check_sp_attention, check_packed,
          check_rl_rollouts)  # fmt: skip


def main() -> int:
    """Run every check (or the ones named on the command line); exit 1 when one fails."""
    import torch

    if not torch.cuda.is_available():
        print("gpu_check_core: no CUDA device", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        only = set(sys.argv[1:])
        for check in CHECKS:
            if only and check.__name__.removeprefix("check_") not in only:
                continue
            try:
                check(work)
            except Exception as exc:  # report every check, whatever breaks
                report(check.__name__, False, error=f"{type(exc).__name__}: {exc}")
    out = os.environ.get("OUT")
    if out:
        Path(out, "gpu_check_core.json").write_text(json.dumps(RESULTS, indent=2))
    return 0 if all(r["ok"] for r in RESULTS) else 1


if __name__ == "__main__":
    sys.exit(main())
