"""Figure 14: training at length, per family: ``swiftcore train`` padded vs packed vs ``swift sft`` (ms-swift 4.6.0).

For each family: its tiny checkpoint (``swiftcore make-tiny``) widened to tens of millions of parameters
(:func:`widen`: the same transformers class and tokenizer, every width of the text model times one factor),
one epoch of LoRA over a mixed-length chat set (:func:`conversations.mixed_length_corpus`, log-uniform turns),
sized so that the padded run takes ``--steps`` optimizer steps. Three runs a family, alternating:

- swiftcore padded: ``--batch-size B --max-length L`` (``steps`` steps);
- swiftcore packed: ``--packing --batch-size 1 --max-length P`` (``--packed-length``, default 320, above the
  default data's longest chat, 273 tokens): one row of up to ``P`` tokens a step, a little more than the real tokens
  of a padded batch of ``B`` = 2 (the default data's chats average about 120 tokens), so it takes somewhat fewer
  steps (each run's steps are reported);
- ms-swift padded: ``swift sft`` with the same settings (its ``--packing`` and ``--padding_free`` need flash
  attention, figure 3), in ``.venv-peers``; a family ms-swift cannot load records its error instead.

Real tokens/s = real (non-pad) tokens of the epoch / the trainer's ``train_runtime`` on every side (start-up,
loading and encoding not counted; they are in the wall seconds). Peak RSS: the child process tree's. Goals
(issue 22): packed >= 1.3x padded and >= 1.5x ms-swift's real tokens/s; a family whose packed run is below
1.3x padded gets :func:`scaling.profile_step` (one step of the same chats padded and packed under torch.profiler).

Usage: ``python bench/train_families.py [--families qwen3_5,gemma4] [--steps 100] [--target-params 10e6]
[--threads 2]``; raw JSON to ``bench/raw/train_families.json``, the section to RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from common import machine, replace_section, write_raw
from conversations import mixed_length_corpus, write_jsonl
from msswift_train import msswift_sft, peer_checkpoint
from scaling import expected_padding, profile_lines, profile_step
from train_throughput import TrainSetup, default_setup, make_tiny, swiftcore_train

__all__ = ["FAMILIES", "run", "widen", "write_section"]

BEGIN, END = "<!-- train-families:begin -->", "<!-- train-families:end -->"
PACKED_GOAL = 1.3  # packed / padded real tokens/s asked by issue 22; a family below it is profiled

# swiftcore model -> ms-swift's (--model_type, --template) for it, None where ms-swift 4.6.0 has no such model.
FAMILIES: dict[str, tuple[str, str] | None] = {
    "qwen3_5": ("qwen3_5", "qwen3_5"),
    "gemma4": ("gemma4", "gemma4"),
    "qwen3_asr": ("qwen3_asr", "qwen3_asr"),
    "deepseek_v4": ("deepseek_v4", "deepseek_v4"),
    "glm5": ("glm_moe_dsa", "glm5_1"),
    "mimo_v2_flash": None,
    "olmoe": ("olmoe", "olmoe"),
}
# Arguments every ms-swift run gets on top of the shared settings: swiftcore's LoRA dropout (0.0; ms-swift's default
# 0.05 also makes peft refuse the fused-expert ParamWrapper that ms-swift's all-linear puts on GLM-5's experts).
PEER_ARGS = ("--lora_dropout", "0")
# Per family: ms-swift's own LoRA targets where its all-linear cannot train the family, set to the modules swiftcore
# adapts (DeepSeek-V4: all-linear wraps the grouped output projection o_a_proj in a plain LoRA Linear, which fails
# on shape at any width; swiftcore's spec excludes it, the routers, the compressors and the indexer).
PEER_TARGETS = {
    "deepseek_v4": r"^model\.layers\.\d+\.(self_attn\.(q_a_proj|q_b_proj|kv_proj|o_b_proj)|"
    r"mlp\.shared_experts\.(gate_proj|up_proj|down_proj))$",
}
# Per family: optimizer steps of ms-swift's run where its steps are too slow for the full epoch (it then trains on
# the first steps x batch chats, one epoch, and its tokens/s is over those): ms-swift's DeepSeek-V4 took 17 s a
# step on the un-widened tiny checkpoint.
PEER_STEPS = {"deepseek_v4": 20}
# Why a family's ms-swift run cannot give a number, read from ms-swift 4.6.0's model registry (swift/model/models).
PEER_LIMITS = {
    "qwen3_asr": "ms-swift's qwen3_asr loader imports `qwen_asr` and its model entry requires `qwen-asr` and "
    "`transformers==4.57.6`; the peer environment has transformers 5.19.0 (the version both systems share), so "
    "ms-swift cannot load it beside the other families",
    "mimo_v2_flash": "ms-swift 4.6.0 registers no model for MiMoV2FlashForCausalLM (its `mimo_v2` is MiMo-V2.5, "
    "MiMoV2ForCausalLM)",
}

# Widths of a text config multiplied by the factor; head sizes stay, so attention grows by its head count.
WIDTHS = (
    "hidden_size",
    "intermediate_size",
    "moe_intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "q_lora_rank",
    "kv_lora_rank",
    "o_lora_rank",
)
# A vision or audio tower's output width that must follow the text model's hidden size.
TOWER_OUTPUTS = ("out_hidden_size", "output_dim")


def _widened_config(tiny: Path, factor: int) -> Any:
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(tiny))
    text = config.get_text_config()
    hidden = text.hidden_size
    for key in WIDTHS:
        value = getattr(text, key, None)
        if isinstance(value, int) and not isinstance(value, bool):
            setattr(text, key, value * factor)
    for tower in ("vision_config", "audio_config"):
        sub = getattr(config, tower, None)
        for key in TOWER_OUTPUTS:
            if sub is not None and getattr(sub, key, None) == hidden:
                setattr(sub, key, hidden * factor)
    return config


def widen(family: str, tiny: Path, out: Path, *, target_params: float, seed: int = 0) -> dict[str, Any]:
    """Write ``tiny`` widened by the smallest whole factor that gives it ``target_params`` parameters or more
    (counted on the meta device first) to ``out``: random weights, the same class, tokenizer and processor files.

    Returns ``{"factor", "parameters", "hidden_size"}``.
    """
    import torch

    from swiftcore import load_plugins
    from swiftcore.api.models import model_class_for, resolve_model_spec

    cls = model_class_for(resolve_model_spec(tiny, load_plugins(env={})))
    factor = 1
    for factor in range(1, 33):
        with torch.device("meta"):
            params = sum(p.numel() for p in cls(_widened_config(tiny, factor)).parameters())
        if params >= target_params:
            break
    info = {
        "factor": factor,
        "parameters": params,
        "hidden_size": _widened_config(tiny, factor).get_text_config().hidden_size,
    }
    marker = out / "swiftcore_bench_widened.json"
    if marker.exists() and json.loads(marker.read_text()) == info:
        return info
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(tiny, out, ignore=shutil.ignore_patterns("*.safetensors", "*.safetensors.index.json"))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = cls(_widened_config(tiny, factor)).to(torch.float32)
    model.save_pretrained(str(out))
    marker.write_text(json.dumps(info))
    return info


def _env(threads: int | None) -> dict[str, str] | None:
    if not threads:
        return None
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def family_runs(
    family: str, model: Path, data: Path, setup: TrainSetup, work: Path, *, packed_length: int, threads: int | None
) -> dict[str, Any]:
    """The three runs of one family (swiftcore padded, ms-swift padded, swiftcore packed), in that order."""
    env = _env(threads)
    out: dict[str, Any] = {}
    try:
        out["swiftcore_padded"] = swiftcore_train(model, data, setup, packing=False, out_dir=work / "padded", env=env)
    except RuntimeError as exc:
        out["swiftcore_padded"] = {"failed": str(exc)[-1500:]}
    peer = FAMILIES.get(family)
    if peer is None:
        out["msswift_padded"] = {"refused": PEER_LIMITS[family]}
    else:
        peer_model = peer_checkpoint(model, work / "peer-model")
        extra = PEER_ARGS + (("--target_regex", PEER_TARGETS[family]) if family in PEER_TARGETS else ())
        peer_data = data
        if family in PEER_STEPS:
            rows = data.read_text().splitlines()[: PEER_STEPS[family] * setup["batch_size"]]
            peer_data = work / f"peer-{data.name}"
            peer_data.write_text("\n".join(rows) + "\n")
        out["msswift_padded"] = msswift_sft(
            peer_model, peer_data, setup, out_dir=work / "msswift", model_type=peer[0], template=peer[1], env=env,
            extra=extra,
        )  # fmt: skip
    packed = TrainSetup({**setup, "batch_size": 1, "max_length": packed_length})
    try:
        out["swiftcore_packed"] = swiftcore_train(model, data, packed, packing=True, out_dir=work / "packed", env=env)
    except RuntimeError as exc:
        out["swiftcore_packed"] = {"failed": str(exc)[-1500:]}
    return out


def _profile(model: Path, rows: list[dict], batch: int, length: int, threads: int | None) -> dict[str, Any]:
    """:func:`scaling.profile_step` on the data's first ``batch`` chats (a family whose packed run missed)."""
    import torch

    from swiftcore import load_plugins

    if threads:
        torch.set_num_threads(threads)
    return profile_step(load_plugins(env={}), model, rows, batch, length)


def data_padding(model: Path, rows: list[dict], batch: int) -> dict[str, float]:
    """How much padding a padded run of ``rows`` carries for ``model``'s template: the chats' encoded lengths (as
    training encodes them) and padded / real tokens of random batches of ``batch`` (:func:`scaling.expected_padding`).
    This bounds what packing can save: a packed step that cost the same per real token as a padded one would be
    this much faster."""
    from swiftcore_train import TrainConfig, load_template

    from swiftcore import load_plugins
    from swiftcore.api.models import resolve_model_spec

    plugins = load_plugins(env={})
    cfg = TrainConfig(model=str(model), dataset=(str(model),), output_dir=str(model), max_length=100_000)
    _, template, tokenizer = load_template(cfg, resolve_model_spec(str(model), plugins), plugins)
    sizes = [len(template.encode(tokenizer, row).input_ids) for row in rows]
    return {"mean_tokens": statistics.mean(sizes), "max_tokens": max(sizes),
            "padded_over_real": expected_padding(sizes, batch)}  # fmt: skip


def _ratio(a: dict[str, Any], b: dict[str, Any]) -> float | None:
    if "tokens_per_s" in a and "tokens_per_s" in b:
        return a["tokens_per_s"] / b["tokens_per_s"]
    return None


def run(
    families: list[str],
    *,
    steps: int,
    batch_size: int,
    max_length: int,
    packed_length: int,
    max_turns: int,
    target_params: float,
    threads: int | None,
    work: Path,
    command: str,
) -> dict[str, Any]:
    """Figure 14 for ``families``; returns the raw result (also written to ``bench/raw/train_families.json``)."""
    start = time.perf_counter()
    setup = default_setup(batch_size, max_length)
    rows = mixed_length_corpus(steps * batch_size, seed=1, max_turns=max_turns)
    data = write_jsonl(rows, work / f"mixed{len(rows)}.jsonl")
    result: dict[str, Any] = {
        "machine": machine(),
        "command": command,
        "setup": dict(setup),
        "steps": steps,
        "samples": len(rows),
        "max_turns": max_turns,
        "threads": threads,
        "packed_length": packed_length,
        "target_params": target_params,
        "families": {},
    }
    for family in families:
        began = time.perf_counter()
        tiny = make_tiny(family, work / f"tiny-{family}")
        model = work / f"wide-{family}"
        shape = widen(family, tiny, model, target_params=target_params)
        print(f"{family}: {shape['parameters'] / 1e6:.1f} M parameters (widths x{shape['factor']})", flush=True)
        runs = family_runs(family, model, data, setup, work / family, packed_length=packed_length, threads=threads)
        entry = {
            **shape,
            "runs": runs,
            "seconds": round(time.perf_counter() - began, 1),
            "packed_over_padded": _ratio(runs["swiftcore_packed"], runs["swiftcore_padded"]),
            "packed_over_msswift": _ratio(runs["swiftcore_packed"], runs["msswift_padded"]),
            "padded_over_msswift": _ratio(runs["swiftcore_padded"], runs["msswift_padded"]),
        }
        entry["data"] = data_padding(model, rows, batch_size)
        if entry["packed_over_padded"] is not None and entry["packed_over_padded"] < PACKED_GOAL:
            entry["profile"] = _profile(model, rows, batch_size, max_length, threads)
        result["families"][family] = entry
        print(
            "  "
            + "; ".join(
                f"{k} {v['tokens_per_s']:.0f} tokens/s" if "tokens_per_s" in v else f"{k} failed"
                for k, v in runs.items()
            ),
            flush=True,
        )
        write_raw("train_families", result)  # a partial result survives a later family's failure
    result["seconds"] = round(time.perf_counter() - start, 1)
    write_raw("train_families", result)
    return result


def _cell(run: dict[str, Any], key: str, fmt: str = "{:.0f}") -> str:
    return fmt.format(run[key]) if key in run else "—"


def _x(value: float | None) -> str:
    return "—" if value is None else f"**{value:.2f}x**"


def _why(run: dict[str, Any]) -> str:
    text = run.get("refused") or run.get("failed") or ""
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return (lines[-1] if lines else "failed")[:400]


def render(raw: dict[str, Any]) -> str:
    """Figure 14's RESULTS.md section."""
    s, m = raw["setup"], raw["machine"]
    lines = [
        BEGIN,
        "",
        "## 14. Training at length, per family: padded vs packed vs ms-swift",
        "",
        f"`{raw['command']}`, {m['date']}, {m['cpu']}, {m['cores']} cores, {raw.get('seconds', 0):.0f} s. Each "
        f"family's tiny checkpoint widened to >= {raw['target_params'] / 1e6:.0f} M parameters (every width of the "
        f"text model times one factor; same class and tokenizer), LoRA r={s['lora_rank']} alpha={s['lora_alpha']} "
        f"on all linear layers, lr {s['learning_rate']}, fp32, one epoch of {raw['samples']} mixed-length chats "
        f"(1-{raw['max_turns']} turns, log-uniform), "
        f"`OMP_NUM_THREADS={raw['threads'] or 'unset'}`. Padded: `--batch-size {s['batch_size']} --max-length "
        f"{s['max_length']}` ({raw['steps']} optimizer steps); packed: `--packing --batch-size 1 --max-length "
        f"{raw['packed_length']}` (one row of up to {raw['packed_length']} tokens a step); ms-swift: `swift sft` "
        "with the padded settings. Real tokens/s = non-pad tokens / the trainer's `train_runtime`. One run of "
        "each, in the order padded, ms-swift, packed. Goals: packed >= 1.3x padded, >= 1.5x ms-swift."
        + (f" Conditions: {raw['conditions']}" if raw.get("conditions") else ""),
        "",
        "| family | parameters | chat tokens mean (max) | padded / real | padded tokens/s (steps) | "
        "packed tokens/s (steps) | ms-swift tokens/s (steps) | packed / padded | packed / ms-swift | padded / ms-swift "
        "| peak RSS MB padded / packed / ms-swift |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    notes = []
    for family, f in raw["families"].items():
        r = f["runs"]
        cells = []
        for kind in ("swiftcore_padded", "swiftcore_packed", "msswift_padded"):
            cells.append(
                f"{_cell(r[kind], 'tokens_per_s')} ({_cell(r[kind], 'steps', '{}')})"
                if "tokens_per_s" in r[kind]
                else "—"
            )
            if "tokens_per_s" not in r[kind]:
                why = _why(r[kind])
                if kind == "msswift_padded" and family in PEER_LIMITS and PEER_LIMITS[family] not in why:
                    why = f"`{why}`: {PEER_LIMITS[family]}"
                notes.append(f"- {family}, {kind.replace('_', ' ')}: {why}")
        rss = " / ".join(_cell(r[k], "peak_rss_mb") for k in ("swiftcore_padded", "swiftcore_packed", "msswift_padded"))
        d = f.get("data") or {}
        shape = f"{d['mean_tokens']:.0f} ({d['max_tokens']}) | {d['padded_over_real']:.2f}" if d else "— | —"
        lines.append(
            f"| {family} | {f['parameters'] / 1e6:.1f} M (x{f['factor']}) | {shape} | {' | '.join(cells)} | "
            f"{_x(f['packed_over_padded'])} | {_x(f['packed_over_msswift'])} | "
            f"{_x(f['padded_over_msswift'])} | {rss} |"
        )
    ratios = [f["packed_over_padded"] for f in raw["families"].values() if f["packed_over_padded"]]
    if ratios:
        lines += [
            "",
            f"packed / padded: median {statistics.median(ratios):.2f}x over {len(ratios)} families "
            f"({min(ratios):.2f}-{max(ratios):.2f}x).",
        ]
    lines += _reading(raw)
    for family, f in raw["families"].items():
        peer = f["runs"]["msswift_padded"]
        if "steps" in peer and peer["steps"] < raw["steps"]:
            lines += [
                "",
                f"ms-swift's {family} run trained {peer['steps']} steps (the first {peer['steps']} x "
                f"{s['batch_size']} chats, one epoch): its steps are too slow for the whole epoch here.",
            ]
    for family, f in raw["families"].items():
        if f.get("profile"):
            lines += ["", *profile_lines(f["profile"], f"**{family}**, packed below {PACKED_GOAL}x padded; profile")]
    if notes:
        lines += ["", "Runs that did not produce a number:", "", *notes]
    lines += ["", END]
    return "\n".join(lines)


def _reading(raw: dict[str, Any]) -> list[str]:
    """What the table says, family by family: the gain against the padding removed, the goal, what bounds a miss."""
    out = ["", "Reading (computed from the table):", ""]
    for family, f in raw["families"].items():
        ratio, data = f["packed_over_padded"], f.get("data")
        if ratio is None or not data:
            continue
        padding = data["padded_over_real"]
        steps = f["runs"]["swiftcore_packed"].get("steps")
        gain = "more than" if ratio > padding * 1.05 else "less than" if ratio < padding * 0.95 else "about"
        line = (
            f"- {family}: packed {ratio:.2f}x padded, {gain} the padding it removes ({padding:.2f}x padded / real "
            f"tokens) in {steps} steps instead of {raw['steps']}"
        )
        if ratio >= PACKED_GOAL:
            line += f"; goal {PACKED_GOAL}x met"
        elif padding < PACKED_GOAL:
            line += (
                f"; goal {PACKED_GOAL}x missed: this data's padding is itself below {PACKED_GOAL}x, so removing it "
                "cannot reach the goal unless a packed token costs less than a padded one (the profile below)"
            )
        else:
            line += f"; goal {PACKED_GOAL}x missed (the profile below)"
        profile = f.get("profile")
        if profile and profile["seconds"]["packed"] > profile["seconds"]["padded"] * 1.1:
            slower = profile["seconds"]["packed"] / profile["seconds"]["padded"]
            line += (
                f"; its profiled packed step took {slower:.2f}x the padded step's time for the same chats: a "
                "family patch that runs layers sample by sample (for exactness) pays per-sample calls that a "
                "padded batch makes once"
            )
        out.append(line + ".")
    out.append(
        "- Where the gain exceeds the padding removed, the rest is per-step cost: a packed row of up to "
        f"{raw['packed_length']} tokens holds more chats than a padded batch of {raw['setup']['batch_size']}, so the "
        "epoch takes fewer optimizer steps (each with its LoRA update and Python overhead, large against a 10 M "
        "parameter model's compute)."
    )
    out.append(
        "- At these chat lengths the linear layers dominate a step and cost per token, so what packing can gain is "
        "about the padding it removes (the padded / real column), and the goal of 1.3x needs more padding than "
        f"batches of {raw['setup']['batch_size']} of this data have. Padding costs more where attention's quadratic "
        "cost shows, in longer sequences: figure 13 measures packed / padded by sequence length."
    )
    return out


def write_section(raw: dict[str, Any]) -> Path:
    """Put figure 14's section into RESULTS.md."""
    return replace_section(render(raw), BEGIN, END)


def main() -> None:
    """Run figure 14 and write its raw JSON and RESULTS.md section."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--steps", type=int, default=100, help="optimizer steps of the padded run (one epoch)")
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--max-length", type=int, default=1024)
    parser.add_argument("--packed-length", type=int, default=320, help="token length of a packed row")
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--target-params", type=float, default=10e6)
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of every run (0: unset)")
    parser.add_argument("--work", type=Path, help="scratch directory (default: a temporary one)")
    parser.add_argument("--conditions", help="what else ran on the machine meanwhile (printed under the figure)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="swiftcore-bench-families-"))
    work.mkdir(parents=True, exist_ok=True)
    command = "python bench/train_families.py " + " ".join(
        f"--{k.replace('_', '-')} {v}"
        for k, v in vars(args).items()
        if k not in ("work", "conditions") and v is not None
    )
    raw = run(
        args.families.split(","),
        steps=args.steps,
        batch_size=args.batch_size,
        max_length=args.max_length,
        packed_length=args.packed_length,
        max_turns=args.max_turns,
        target_params=args.target_params,
        threads=args.threads,
        work=work,
        command=command,
    )
    if args.conditions:
        raw["conditions"] = args.conditions
        write_raw("train_families", raw)
    write_section(raw)
    print(render(raw))


if __name__ == "__main__":
    main()
