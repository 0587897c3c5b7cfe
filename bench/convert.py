"""Benchmark: HF <-> Megatron-core conversion of a generated ~1 GB model, against a plain file copy.

Figure 9 of ``make bench`` (or ``.venv/bin/python bench/convert.py [--size-gb 1] [--tp 1 2] [--keep DIR]``): prints
a table, writes JSON to bench/raw/convert.json and its section of RESULTS.md. Not a test: shared machines are
noisy. The goals (the issue's): conversion throughput at least 50% of the copy's, peak RSS below 2x the largest
shard. A conversion that misses the throughput goal is profiled (py-spy, one more run at TP 1 of the direction that
misses most) and the profile's top entries are part of the figure.

The model is a Qwen3 layout (every tensor name and shape a real checkpoint has) with random bf16
weights, written straight to safetensors shards of ``--shard-mb`` (no transformers model is
materialised). Each conversion runs in a fresh process, which reports its own peak RSS (``VmHWM``;
a process that only imports torch and swiftcore sits near 230 MB); the copy baseline copies the same
shard files with ``shutil.copyfile``.

Both sides are timed from disk to disk, so the ratio compares work with work rather than the kernel's memory copy
with Python: before each timed copy or conversion every file it reads is synced and dropped from the page cache
(``posix_fadvise(POSIX_FADV_DONTNEED)``, which needs no root), and its time includes ``os.sync()`` of what it wrote.
(Earlier figures timed page-cache to page-cache: a quiet machine's copy then ran at 3.5 GB/s and the conversions came
to 5-11 % of it; under memory pressure the copy fell to 0.3-0.4 GB/s and they reached 37-47 %.)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import pyspy  # noqa: E402
from common import machine, machine_text  # noqa: E402


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
    from swiftcore_megatron import HFWriter

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


def _cold(*dirs: Path) -> None:
    """Sync, then drop every file under ``dirs`` from the page cache, so the next read of them comes from disk."""
    os.sync()
    for root in dirs:
        for path in root.rglob("*"):
            if path.is_file():
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)


def _synced_seconds() -> float:
    """Seconds ``os.sync()`` takes: the writes still in the page cache reaching the disk."""
    start = time.perf_counter()
    os.sync()
    return time.perf_counter() - start


#: py-spy's sampling rate for the profile of a miss.
PROFILE_RATE = 250
#: Where the profile looks: the conversion itself (the rest is start-up: imports, reading the config).
PROFILE_MARKERS = {"conversion": r"(hf_to_mcore|mcore_to_hf) "}


def run_child(direction: str, src: Path, dst: Path, tp: int, cfg_dir: Path, profile: bool = False) -> dict:
    """One conversion in a fresh process, from a cold page cache; its own timing plus the sync of what it wrote,
    and its peak RSS (with ``profile``, run under py-spy: its top functions by own time as ``profile``)."""
    argv = [sys.executable, "-c", _CHILD, direction, str(src), str(dst), str(tp), str(cfg_dir)]
    _cold(src, cfg_dir)
    if profile:
        with tempfile.TemporaryDirectory(prefix="swiftcore-bench-convert-profile-") as tmp:
            prof = pyspy.record(argv, Path(tmp) / "stacks.txt", PROFILE_MARKERS, PROFILE_RATE, threads=False,
                                nonblocking=True, idle=True, capture=True)  # fmt: skip
        if "error" in prof:
            raise RuntimeError(f"the profiled conversion failed: {prof['error']}")
        printed = prof.pop("stdout")
    else:
        printed = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    results = [line for line in printed.splitlines() if line.startswith("{")]  # py-spy prints lines of its own
    if not results:
        raise RuntimeError(f"the {direction} conversion printed no result:\n{printed[-2000:]}")
    result = json.loads(results[-1])
    if profile:
        result["profile"] = [{"function": t["function"], "own_s": t["samples"] / PROFILE_RATE, "share": t["share"]}
                             for t in prof["top_own"][:8]]  # fmt: skip
        result["profile_wall_s"] = prof["samples"] / PROFILE_RATE
        result["profile_conversion_share"] = prof["markers"]["conversion"]["share"]
    result["sync_seconds"] = _synced_seconds()
    result["seconds"] += result["sync_seconds"]
    return result


def copy_baseline(src: Path, dst: Path) -> float:
    """Seconds to copy every safetensors file of ``src`` into ``dst``, from a cold page cache, synced to disk."""
    dst.mkdir()
    _cold(src)
    start = time.perf_counter()
    for f in sorted(src.glob("*.safetensors")):
        shutil.copyfile(f, dst / f.name)
    os.sync()
    return time.perf_counter() - start


def run(size_gb: float = 1.0, tps: tuple[int, ...] = (1, 2), shard_mb: int = 500, keep: Path | None = None,
        rounds: int = 3) -> dict:
    """Generate the model; ``rounds`` times copy it and convert it both ways at each TP size; profile a miss."""
    work = keep or Path(tempfile.mkdtemp(prefix="swiftcore-bench-convert-"))
    work.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    try:
        config = qwen3_config(size_gb)
        hf = work / "hf"
        total = generate(hf, config, shard_mb)
        largest = max(f.stat().st_size for f in hf.glob("*.safetensors"))
        mb = total / 1024**2
        # Rounds alternate the copy and the conversions (A B A B ...), so page-cache and disk drift hit both; each
        # row is the median round.
        runs: dict[str, list[dict]] = {}
        for _ in range(rounds):
            copy_s = copy_baseline(hf, work / "copy")
            shutil.rmtree(work / "copy")
            runs.setdefault("plain copy", []).append({"seconds": copy_s, "peak_rss_mb": None})
            for tp in tps:
                runs.setdefault(f"HF -> mcore tp={tp}", []).append(run_child("to-mcore", hf, work / "mcore", tp, hf))
                back = run_child("to-hf", work / "mcore", work / "back", tp, hf)
                runs.setdefault(f"mcore tp={tp} -> HF", []).append(back)
                shutil.rmtree(work / "mcore")
                shutil.rmtree(work / "back")
        rows = []
        for what, results in runs.items():
            median = sorted(results, key=lambda r: r["seconds"])[len(results) // 2]
            rows.append({"what": what, **median, "mb_per_s": mb / median["seconds"],
                         "all_seconds": [r["seconds"] for r in results]})  # fmt: skip
        profile = None
        worst = min(rows[1:], key=lambda r: r["mb_per_s"])
        if worst["mb_per_s"] < 0.5 * rows[0]["mb_per_s"]:  # profile the direction that misses most, at TP 1
            if worst["what"].endswith("-> HF"):
                run_child("to-mcore", hf, work / "mcore_profiled", 1, hf)
                profile = run_child("to-hf", work / "mcore_profiled", work / "back_profiled", 1, hf, profile=True)
                profile["what"] = "mcore -> HF"
            else:
                profile = run_child("to-mcore", hf, work / "mcore_profiled", 1, hf, profile=True)
                profile["what"] = "HF -> mcore"
        return {
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "machine": machine(),
            "python": platform.python_version(),
            "model": f"qwen3 layout, {config['num_hidden_layers']} layers, bf16, {mb:.0f} MB",
            "largest_shard_mb": largest / 1024**2,
            "rows": rows,
            "rounds": rounds,
            "disk_to_disk": True,
            "profile": profile,
            "seconds": time.perf_counter() - start,
        }
    finally:
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)


BEGIN, END = "<!-- convert:begin -->", "<!-- convert:end -->"


def render(raw: dict) -> str:
    """The Markdown section of figure 9."""
    copy = raw["rows"][0]["mb_per_s"]
    shard = raw["largest_shard_mb"]
    lines = [BEGIN, "", "## 9. Conversion HF <-> Megatron-core against a plain copy", "",
             f"`bench/convert.py`, {raw['date']}, {machine_text(raw['machine'])}, {raw['seconds']:.0f} s: "
             f"{raw['model']} (largest HF "
             f"shard {shard:.0f} MB), random weights written as safetensors shards; each conversion in a fresh "
             "process (its own peak RSS, `VmHWM`); the copy is `shutil.copyfile` of the same shards; "
             + ("both read from disk (the inputs dropped from the page cache first) and are timed until their output "
                "is synced to disk; " if raw.get("disk_to_disk") else "both from and into the page cache; ")
             + f"each row the median of {raw.get('rounds', 1)} rounds alternating copy and conversions. Goals: "
             "throughput >= 50% of the copy's, peak RSS < 2x the largest shard.", "",
             "| what | seconds | MB/s | / copy | peak RSS (MB) | RSS / largest shard |",
             "| --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for r in raw["rows"]:
        rss = r["peak_rss_mb"]
        lines.append(f"| {r['what']} | {r['seconds']:.2f} | {r['mb_per_s']:.0f} | {r['mb_per_s'] / copy:.0%} | "
                     f"{f'{rss:.0f}' if rss else '—'} | {f'{rss / shard:.2f}' if rss else '—'} |")  # fmt: skip
    if raw.get("profile"):
        prof = raw["profile"]
        lines += ["", f"Throughput misses the goal; profile of one more {prof.get('what', 'HF -> mcore')} run at TP 1 "
                  f"({prof['seconds']:.2f} s) under `py-spy record --idle` ({PROFILE_RATE} Hz, the process's wall "
                  f"clock from start-up to exit, {prof['profile_wall_s']:.2f} s, of which "
                  f"{prof['profile_conversion_share']:.0%} inside the conversion; waiting on the disk counts), its top "
                  "functions by own time:", "",
                  "| function | own s | share of the process's wall clock |", "| --- | --- | --- |"]  # fmt: skip
        lines += [f"| `{e['function']}` | {e['own_s']:.2f} | {e['share']:.1%} |" for e in prof["profile"]]
        lines += ["", "How to read it: HF -> mcore writes rank files with torch's zip writer (`write_record`: "
                  "`torch.save`'s format, which Megatron-LM reads; a user-space write and a CRC32 per tensor, where "
                  "the copy is the kernel's `copyfile`), fuses q/k/v and gate/up (`cat`) and copies the tensors still "
                  "backed by the memory-mapped shards (`clone`; fused ones are written as built). mcore -> HF reads "
                  "the rank files lazily (torch's zip reader), splits the fused tensors back and writes safetensors. "
                  + (f"The copy moved {copy:.0f} MB/s from disk to disk; the conversions do the same I/O plus "
                     "that per-byte work, on this machine's two cores."
                     if raw.get("disk_to_disk") else
                     f"The copy moved {copy:.0f} MB/s from and into the page cache, a memory copy in the kernel.")]
    lines += ["", END]
    return "\n".join(lines)


def write_section(raw: dict) -> Path:
    """Replace (or append) figure 9's section of RESULTS.md."""
    from common import replace_section

    return replace_section(render(raw), BEGIN, END)


def main() -> None:
    """Run figure 9; print its table, save its raw JSON and its RESULTS.md section."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size-gb", type=float, default=1.0)
    parser.add_argument("--shard-mb", type=int, default=500, help="HF shard size of the generated model")
    parser.add_argument("--tp", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--keep", type=Path, default=None, help="work directory to keep (default: a temp dir)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds alternating the copy and the conversions")
    args = parser.parse_args()
    raw = run(args.size_gb, tuple(args.tp), args.shard_mb, args.keep, args.rounds)
    out = ROOT / "bench" / "raw"
    out.mkdir(exist_ok=True)
    (out / "convert.json").write_text(json.dumps(raw, indent=2) + "\n")
    print(write_section(raw).read_text().split(BEGIN)[1].split(END)[0])


if __name__ == "__main__":
    main()
