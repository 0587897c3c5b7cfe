"""Benchmark: HF <-> Megatron-core conversion of a generated ~1 GB model, against a plain file copy.

Run by hand (``.venv/bin/python bench/convert.py [--size-gb 1] [--tp 1 2] [--keep DIR]``); prints a
table and writes JSON to bench/raw/convert.json. Not a test: shared machines are noisy.

The model is a Qwen3 layout (every tensor name and shape a real checkpoint has) with random bf16
weights, written straight to safetensors shards of ``--shard-mb`` (no transformers model is
materialised). Each conversion runs in a fresh process, which reports its own peak RSS (``VmHWM``;
a process that only imports torch and swiftcore sits near 230 MB); the copy baseline copies the same
shard files with ``shutil.copyfile``.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def qwen3_config(size_gb: float) -> dict:
    """A Qwen3 config whose bf16 weights take about ``size_gb`` GB (layers scaled to fit)."""
    hidden, inter, vocab, heads, kv, head_dim = 1536, 4608, 32000, 12, 4, 128
    per_layer = hidden * head_dim * (2 * heads + 2 * kv) + 3 * hidden * inter + 2 * hidden + 2 * head_dim
    embed = 2 * vocab * hidden + hidden
    layers = max(1, round((size_gb * 1e9 / 2 - embed) / per_layer))
    return {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": hidden,
        "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": heads,
        "num_key_value_heads": kv, "head_dim": head_dim, "vocab_size": vocab, "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0, "tie_word_embeddings": False, "hidden_act": "silu",
        "max_position_embeddings": 4096, "torch_dtype": "bfloat16",
    }


def generate(out: Path, config: dict, shard_mb: int) -> int:
    """Write random bf16 weights for ``config`` into safetensors shards; return the bytes written."""
    import torch
    from swiftcore_megatron.checkpoint import HFWriter

    with torch.device("meta"):
        import transformers

        model = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**config))
        shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    writer = HFWriter(out, shard_mb * 1024**2)
    gen = torch.Generator().manual_seed(0)
    for key, shape in shapes.items():
        writer.add(key, torch.randn(shape, generator=gen, dtype=torch.float32).to(torch.bfloat16))
    writer.close()
    return writer.total_bytes


_CHILD = """
import json, sys, time
from swiftcore_megatron.convert import hf_to_mcore, mcore_to_hf
from swiftcore_megatron.resolve import read_hf_config
from swiftcore_bridge_gpt.gpt import GPTBridge
direction, src, dst, tp, cfg_dir = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
bridge = GPTBridge(read_hf_config(cfg_dir))
start = time.perf_counter()
if direction == "to-mcore":
    result = hf_to_mcore(src, dst, bridge, tp=tp)
else:
    result = mcore_to_hf(src, dst, bridge)
seconds = time.perf_counter() - start
# VmHWM: this process image's peak RSS (ru_maxrss would include the parent's RSS at fork time).
hwm = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"seconds": seconds, "bytes": result.bytes, "peak_rss_mb": int(hwm.split()[1]) / 1024}))
"""


def run_child(direction: str, src: Path, dst: Path, tp: int, cfg_dir: Path) -> dict:
    """One conversion in a fresh process; its own timing and peak RSS."""
    done = subprocess.run([sys.executable, "-c", _CHILD, direction, str(src), str(dst), str(tp), str(cfg_dir)],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def copy_baseline(src: Path, dst: Path) -> float:
    """Seconds to copy every safetensors file of ``src`` into ``dst``."""
    dst.mkdir()
    start = time.perf_counter()
    for f in sorted(src.glob("*.safetensors")):
        shutil.copyfile(f, dst / f.name)
    return time.perf_counter() - start


def main() -> None:
    """Generate, copy, convert both ways at each TP size; print and save the figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size-gb", type=float, default=1.0)
    parser.add_argument("--shard-mb", type=int, default=500, help="HF shard size of the generated model")
    parser.add_argument("--tp", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--keep", type=Path, default=None, help="work directory to keep (default: a temp dir)")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="swiftcore-bench-convert-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        config = qwen3_config(args.size_gb)
        hf = work / "hf"
        total = generate(hf, config, args.shard_mb)
        largest = max(f.stat().st_size for f in hf.glob("*.safetensors"))
        mb = total / 1024**2
        rows = []
        copy_s = copy_baseline(hf, work / "copy")
        rows.append({"what": "plain copy", "seconds": copy_s, "mb_per_s": mb / copy_s, "peak_rss_mb": None})
        for tp in args.tp:
            out = run_child("to-mcore", hf, work / f"mcore_tp{tp}", tp, hf)
            rows.append({"what": f"HF -> mcore tp={tp}", **out, "mb_per_s": mb / out["seconds"]})
            back = run_child("to-hf", work / f"mcore_tp{tp}", work / f"back_tp{tp}", tp, hf)
            rows.append({"what": f"mcore tp={tp} -> HF", **back, "mb_per_s": mb / back["seconds"]})
            shutil.rmtree(work / f"mcore_tp{tp}")
            shutil.rmtree(work / f"back_tp{tp}")
        report = {
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
            "python": platform.python_version(),
            "model": f"qwen3 layout, {config['num_hidden_layers']} layers, bf16, {mb:.0f} MB",
            "largest_shard_mb": largest / 1024**2,
            "rows": rows,
        }
        print(f"{report['model']}; largest HF shard {report['largest_shard_mb']:.0f} MB")
        print(f"{'what':<22}{'seconds':>9}{'MB/s':>9}{'peak RSS MB':>13}{'RSS/shard':>11}")
        for r in rows:
            rss = r["peak_rss_mb"]
            ratio = f"{rss / report['largest_shard_mb']:.2f}" if rss else "-"
            print(f"{r['what']:<22}{r['seconds']:>9.2f}{r['mb_per_s']:>9.0f}{(f'{rss:.0f}' if rss else '-'):>13}"
                  f"{ratio:>11}")
        raw = ROOT / "bench" / "raw"
        raw.mkdir(exist_ok=True)
        (raw / "convert.json").write_text(json.dumps(report, indent=2) + "\n")
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
