"""Write ``bench/RESULTS.md`` from ``bench/raw/msswift_compare.json``, ``msswift_dpo.json`` and ``peers.json``; the
figures with a script of their own (6-16) render their sections from their raw JSON, and figure 17 (the chunked
loss's peak memory, ``chunked_loss_memory.json``, whose script writes raw JSON only) is rendered here.

Every number in the table comes from the raw JSON; a figure that failed or that ms-swift refused is
written as such, with the reason, never as a number.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from common import RAW, ROOT, machine_text, replace_section

__all__ = ["chunked_loss_section", "render", "write_results"]

RESULTS = ROOT / "bench" / "RESULTS.md"
TARGETS = {
    "cli": "swiftcore >= 5x faster",
    "encode": ">= 2x ms-swift; <= 1.3x the bare tokenizer's time",
    "train_padded": ">= 1.0x ms-swift",
    "train_packed": ">= 1.3x ms-swift (padded)",
    "dpo": ">= 1.0x ms-swift",
}


def _m(stats: dict[str, float] | None, fmt: str = "{:.1f}") -> str:
    if not stats:
        return "n/a"
    return f"{fmt.format(stats['median'])} ({fmt.format(stats['min'])}–{fmt.format(stats['max'])})"


def _r(stats: dict[str, float] | None) -> str:
    return "n/a" if not stats else f"{stats['median']:.2f}x ({stats['min']:.2f}–{stats['max']:.2f})"


def _rows(data: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    rows = []
    cli = data.get("cli")
    if cli:
        s = cli["seconds"]
        rows.append(("1. `swiftcore --help` vs `swift --help` (s)", _m(s["swiftcore --help"], "{:.2f}"),
                     _m(s["swift --help"], "{:.2f}"), _r(cli["ratio_swift_help_over_swiftcore_help"]), TARGETS["cli"]))
        rows.append(("1. `swiftcore plugins` vs `swift --help` (s)", _m(s["swiftcore plugins"], "{:.2f}"),
                     _m(s["swift --help"], "{:.2f}"), _r(cli["ratio_swift_help_over_swiftcore_plugins"]),
                     TARGETS["cli"]))
        rows.append(("1. `swiftcore --help` vs `swift sft --help` (s)", _m(s["swiftcore --help"], "{:.2f}"),
                     _m(s["swift sft --help"], "{:.2f}"), _r(cli["ratio_swift_sft_help_over_swiftcore_help"]),
                     TARGETS["cli"]))
    enc = data.get("encode")
    if enc:
        for name, t in enc["templates"].items():
            sps = t["samples_per_s"]
            rows.append((f"2. encode {name} (samples/s, n={enc['n']})", _m(sps["swiftcore"], "{:.0f}"),
                         _m(sps["msswift"], "{:.0f}"), _r(t["ratio_swiftcore_over_msswift"]), TARGETS["encode"]))
            rows.append((f"2. bare tokenizer floor {name} (samples/s)", _m(sps["floor"], "{:.0f}"), "—",
                         "floor/swiftcore " + _r(t["ratio_floor_over_swiftcore"]), "<= 1.3x"))
    train = data.get("train")
    if train:
        tps, rss = train["tokens_per_s"], train["peak_rss_mb"]
        rows.append(("3. train tokens/s, padded vs padded", _m(tps["swiftcore_padded"]), _m(tps["msswift_padded"]),
                     _r(train["ratio_padded"]), TARGETS["train_padded"]))
        rows.append(("3. train tokens/s, swiftcore packed vs ms-swift padded", _m(tps["swiftcore_packed"]),
                     _m(tps["msswift_padded"]) + " (packing refused)", _r(train["ratio_packed_vs_msswift_padded"]),
                     TARGETS["train_packed"]))
        rows.append(("3. train peak RSS MB (padded)", _m(rss["swiftcore_padded"], "{:.0f}"),
                     _m(rss["msswift_padded"], "{:.0f}"), "—", "—"))
        rows.append(("3. train peak RSS MB (swiftcore packed)", _m(rss["swiftcore_packed"], "{:.0f}"), "—", "—", "—"))
    inf = data.get("infer")
    if inf:
        rows.append((f"4. infer tokens/s (n={inf['n']}, batch {inf['batch_size']}, {inf['max_new_tokens']} new)",
                     _m(inf["tokens_per_s"]["swiftcore"]), _m(inf["tokens_per_s"]["msswift"]), _r(inf["ratio"]), "—"))
    rows += _dpo_rows(data.get("dpo"))
    return rows


def _dpo_rows(dpo: dict[str, Any] | None) -> list[tuple[str, str, str, str, str]]:
    """Figure 5 (``bench/msswift_dpo.py``): DPO pairs/s; none when it failed (its note says why)."""
    if not dpo or "pairs_per_s" not in dpo:
        return []
    pps, rss = dpo["pairs_per_s"], dpo["peak_rss_mb"]
    n = len(dpo["raw_pairs_per_s"]["swiftcore_padded"])
    ms = _m(pps.get("msswift_padded"), "{:.2f}")
    return [
        (f"5. DPO pairs/s, padded vs padded ({n} runs)", _m(pps["swiftcore_padded"], "{:.2f}"), ms,
         _r(dpo.get("ratio_padded")), TARGETS["dpo"]),
        (f"5. DPO pairs/s, swiftcore padding-free vs ms-swift padded ({n} runs)",
         _m(pps["swiftcore_padding_free"], "{:.2f}"), ms + " (padding_free refused)"
         if "refused" in dpo.get("msswift_refusals", {}).get("--padding_free", {}) else ms,
         _r(dpo.get("ratio_padding_free_vs_msswift_padded")), TARGETS["dpo"]),
        ("5. DPO peak RSS MB (padded)", _m(rss["swiftcore_padded"], "{:.0f}"),
         _m(rss.get("msswift_padded"), "{:.0f}"), "—", "—"),
        ("5. DPO peak RSS MB (swiftcore padding-free)", _m(rss["swiftcore_padding_free"], "{:.0f}"), "—", "—", "—"),
    ]


def _dpo_notes(dpo: dict[str, Any] | None) -> list[str]:
    if not dpo:
        return []
    m = dpo["machine"]
    out = [f"- Figure 5 (DPO) was measured on its own: `{dpo.get('command', 'python bench/msswift_dpo.py')}`, "
           f"{m['date']}, {m['cpu']}, {m['cores']} cores, {m['memory_gb']} GB; {dpo.get('seconds', 'n/a')} s."]
    if "error" in dpo:
        return out + [f"- Figure 5 FAILED in this run: `{dpo['error']}`"]
    s = dpo["setup"]
    out.append(f"- Figure 5 setup: `swiftcore train --recipe dpo` vs `swift rlhf --rlhf_type dpo`, same tiny qwen3_5 "
               f"and tokenizer, LoRA r={s['lora_rank']} alpha={s['lora_alpha']} on all linear layers (reference = "
               f"the adapter-disabled policy on both), beta {s['beta']}, {s['loss_type']} loss, batch "
               f"{s['batch_size']}, max length {s['max_length']}, one epoch of {dpo['pairs']} pairs "
               f"({dpo['steps_per_epoch']} steps; chats of 1–{dpo.get('max_turns', '?')} turns, ms-swift's "
               "`messages` + `rejected_response` rows), fp32, CPU, gradient accumulation 1, no gradient "
               "checkpointing (ms-swift's default, on, is switched off), "
               f"`OMP_NUM_THREADS={s.get('threads', '?')}` for both. Pairs/s = pairs / the trainer's "
               "`train_runtime` (start-up, loading and encoding not counted). The two shuffle the epoch "
               "differently (seed 42 each), so their batches pad to different lengths.")
    for flag, r in dpo.get("msswift_refusals", {}).items():
        verdict = f"refused: `{r['refused']}`" if "refused" in r else "ran (not refused)"
        out.append(f"- ms-swift `swift rlhf --rlhf_type dpo {flag} true` on CPU: {verdict}")
    pf = dpo.get("ratio_padding_free_over_padded")
    if pf:
        first = dpo.get("first_step", {})
        a, b = first.get("swiftcore_padded"), first.get("swiftcore_padding_free")
        same = (f" First-step logps/chosen padding-free vs padded: {b['first_logps_chosen']:.5f} vs "
                f"{a['first_logps_chosen']:.5f}.") if a and b else ""
        out.append(f"- Figure 5, swiftcore `--padding-free` / padded (per-pair ratio): {_r(pf)}. On this model and CPU "
                   "packing has little to save: Qwen3.5's gated-DeltaNet (linear-attention) layers run a packed "
                   "row's sequences one by one on a CPU (elsewhere they re-lay them as a right-padded batch) to stay "
                   "exact (`swiftcore_plugin_qwen3_5.packing`), so they do not gain from the padding packing saves, "
                   "and the softmax-attention layer runs each sequence of the row alone on sdpa "
                   "(`swiftcore_data.packed_attention`; no flash-attention on CPU), so what packing saves is the "
                   "padding, and these pairs are short, so there is little of it (read from the code, not "
                   "profiled; figure 14 measures packing on longer training runs with a profile)." + same)
    first = dpo.get("first_step", {})
    cells = []
    for k, v in first.items():
        cells.append(f"{k} loss {v['first_loss']:.5f}, logps/chosen {v['first_logps_chosen']:.3f}, "
                     f"logps/rejected {v['first_logps_rejected']:.3f}" if v else f"{k} n/a")
    out.append(f"- Figure 5 first step, all {dpo.get('check_pairs', '?')} check pairs in one batch (order-free): "
               + "; ".join(cells))
    a, b = first.get("swiftcore_padded"), first.get("msswift_padded")
    if a and b:
        rel = abs(a["first_logps_chosen"] - b["first_logps_chosen"]) / abs(b["first_logps_chosen"])
        out.append(f"  - The first loss is ln 2 = 0.69315 on both sides whatever the data (a fresh adapter has "
                   f"B = 0, so policy = reference). logps/chosen differ by {rel:.2%}: "
                   + ("equal within 1%." if rel < 0.01 else "expected, the two do not score the same tokens. "
                      "swiftcore's completion is the reply and `<|im_end|>` (the tokens SFT trains; the empty "
                      "`<think>\\n\\n</think>\\n\\n` of the generation prompt is prompt); ms-swift's is "
                      "`<think>\\n\\n</think>\\n\\n` + reply + `<|im_end|>\\n` (checked by encoding the first "
                      "check pair on both sides), so its sums include those extra tokens; its prompts also differ "
                      "where a chat has earlier assistant turns (figure 2)."))
    return out


def _notes(data: dict[str, Any]) -> list[str]:
    out = []
    cli = data.get("cli")
    if cli:
        out.append(f"- Figure 1: exit codes {cli['exit_codes']}. ms-swift 4.6.0's `swift --help` loads its route "
                   "table and then dies with `KeyError: '--help'`; `swift sft --help` is the help that works.")
    enc = data.get("encode")
    if enc:
        for name, t in enc["templates"].items():
            d = t["token_id_differences"]
            out.append(f"- Figure 2, {name}: token ids differ on {d['differ']} of {enc['n']} samples; of those "
                       f"swiftcore matches the official template on {d['swiftcore_matches_official']}, ms-swift on "
                       f"{d['msswift_matches_official']}, neither on {d['neither']}; ms-swift failed on "
                       f"{d['msswift_failed']} ({t['msswift_errors'] or 'no errors'}). "
                       f"{t['tokens_per_sample']:.0f} tokens/sample.")
            if t.get("floor_method"):
                wrapper = t.get("ratio_floor_wrapper_over_swiftcore")
                out.append(f"  - floor = {t['floor_method']}"
                           + (f"; `tokenizer(texts)` (the transformers call) instead: floor/swiftcore {_r(wrapper)}"
                              if wrapper else "") + "; where swiftcore's time over the floor goes: figure 15")
            if d["swiftcore_matches_official"] < d["differ"]:
                out.append("  - swiftcore's side is the training encoding, which follows the train/serve rule "
                           "(docs/writing-a-plugin.md): the thinking mode is inferred from the reply (Gemma 4 then "
                           "opens the system turn with `<|think|>`) and the trained reply is rendered after the "
                           "generation prompt inference uses; the official side is `apply_chat_template` of the whole "
                           "chat with the template's defaults. Where a template renders a last reply differently from "
                           "its generation prompt (Gemma 4), the two are not meant to be equal; the rule's own tests "
                           "are the template conformance suite (`template-train-serve`).")
            for example in d.get("examples", []):
                if example.get("matches_official") == "neither":
                    out.append(f"  - e.g. sample {example['index']} (neither matches): official "
                               f"`{example['official_text_at_swiftcore_difference']!r}`, swiftcore "
                               f"`{example['swiftcore_text']!r}`, ms-swift `{example['msswift_text']!r}`")
                    break
    train = data.get("train")
    if train:
        s = train["setup"]
        out.append(f"- Figure 3 setup: tiny qwen3_5 (random, ~0.56 M parameters), LoRA r={s['lora_rank']} "
                   f"alpha={s['lora_alpha']} on all linear layers, batch {s['batch_size']}, max length "
                   f"{s['max_length']}, one epoch over {train.get('samples', '?')} mixed-length samples, fp32, CPU, "
                   "gradient accumulation 1. Tokens/s = real tokens / "
                   "the trainer's `train_runtime` (start-up, loading and encoding not counted).")
        for flag, r in train["msswift_refusals"].items():
            verdict = f"refused: `{r['refused']}`" if "refused" in r else "ran (not refused)"
            out.append(f"- ms-swift `{flag} true` on CPU: {verdict}")
        f = train["first_step_loss"]
        out.append(f"- First-step loss, all {train['check_samples']} check samples in one batch (order-free): "
                   + ", ".join(f"{k} {v:.5f}" if v is not None else f"{k} n/a" for k, v in f.items()))
        a, b = f.get("swiftcore_padded"), f.get("msswift_padded")
        if a is not None and b is not None:
            rel = abs(a - b) / abs(b)
            verdict = "equal within 1%" if rel < 0.01 else "NOT equal within 1%"
            out.append(f"  - swiftcore vs ms-swift: relative difference {rel:.2%} ({verdict}). Same weights and "
                       "rows, but not the same tokens: ms-swift's qwen3_5 template puts an empty "
                       "`<think>\\n\\n</think>` block into every assistant turn, the official template only "
                       "into the last one (figure 2 counts those samples), so exact equality is not expected.")
    inf = data.get("infer")
    if inf:
        out.append(f"- Figure 4: generated texts differ on {inf['texts_differ']} of {inf['n']} prompts "
                   f"(greedy, same weights, random tiny model); completion tokens per run "
                   f"{inf['completion_tokens']}. First prompt: swiftcore `{inf['example']['swiftcore'][:80]!r}`, "
                   f"ms-swift `{inf['example']['msswift'][:80]!r}` (the two encode the generation prompt "
                   "differently, so greedy outputs of a random model diverge).")
    out += _dpo_notes(data.get("dpo"))
    for name, error in (data.get("errors") or {}).items():
        out.append(f"- Figure {name} FAILED in this run: `{error}`")
    return out


def render(data: dict[str, Any], peers: dict[str, Any] | None) -> str:
    """The Markdown of RESULTS.md for the raw result ``data``."""
    m = data["machine"]
    versions = (peers or {}).get("versions", {})
    lines = [
        "# swiftcore vs ms-swift: side-by-side benchmarks",
        "",
        "Generated by `make bench` (`bench/run_all.py`); raw JSON in `bench/raw/`. Each cell: median "
        f"(min–max) of {data['runs']} alternating runs (A B A B ...); ratio = median of the per-pair ratios.",
        "",
        f"- machine: {m['cpu']}, {m['cores']} cores, {m['memory_gb']} GB, {m['os']}, Python {m['python']}",
        f"- date: {m['date']}",
        f"- ms-swift environment (`.venv-peers`): {json.dumps(versions)}; set-up took "
        f"{(peers or {}).get('setup_s', 'n/a')} s" + (f" ({peers['note']})" if (peers or {}).get("note") else ""),
        f"- swiftcore environment: {json.dumps(data.get('versions', {}))}",
        f"- the whole comparison took {data.get('seconds', 'n/a')} s"
        + (f"; re-measured later (after a fix): {data['remeasured']}" if data.get("remeasured") else ""),
        "",
        "| figure | swiftcore | ms-swift | ratio (swiftcore advantage) | target |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += [f"| {' | '.join(row)} |" for row in _rows(data)]
    lines += ["", "## Notes", ""] + _notes(data)
    lines += ["", "## How ms-swift was run", "",
              "- `.venv-peers` by `bench/peers.py`: torch 2.13.0 (CPU wheel) first, then `ms-swift==4.6.0`, "
              "transformers 5.19.0, peft 0.20, `qwen_vl_utils` (ms-swift's Qwen3.5 loader requires it); "
              "torchvision removed (PyPI's build is CUDA-only and breaks `import transformers` next to a CPU "
              "torch), and `qwen_vl_utils`' module-level torchvision import made optional (only its video "
              "readers use it).",
              "- ms-swift gets a copy of the same checkpoint without `processor_config.json` (transformers "
              "cannot build `Qwen3VLProcessor` without torchvision); `bench/_msswift_plugin.py`, passed with "
              "ms-swift's own `--external_plugins`, attaches transformers' PIL Qwen2-VL image processor "
              "because ms-swift runs the vision tower on a dummy image even for text-only batches.",
              "- `swift sft` always needs `--model_type qwen3_5 --template qwen3_5` for a local tiny "
              "checkpoint (name matching is ambiguous), and defaults gradient accumulation to reach a batch "
              "of 16, so `--gradient_accumulation_steps 1` is passed."]
    if data.get("dpo"):
        lines.append("- `swift rlhf --rlhf_type dpo` (figure 5) takes the same flags as `swift sft` plus `--beta`, "
                     "`--loss_type sigmoid` and `--gradient_checkpointing false` (ms-swift turns gradient "
                     "checkpointing on by default, swiftcore off); it needed nothing else on CPU. Only its "
                     "`--padding_free` is refused (flash attention required).")
    lines.append("")
    return "\n".join(lines)


def write_results() -> Path:
    """Render RESULTS.md from the raw JSON files.

    Figures 1-5 come from ``msswift_compare.json`` (and ``msswift_dpo.json``); where that file is absent (a run of
    other figures only, on a checkout whose figures 1-5 predate committed raw JSON) RESULTS.md keeps its present
    figures 1-5 text and only the sections of the other figures are rendered again."""
    compare = RAW / "msswift_compare.json"
    if compare.exists():
        data = json.loads(compare.read_text())
        dpo = RAW / "msswift_dpo.json"
        if dpo.exists():
            data["dpo"] = json.loads(dpo.read_text())
        peers_path = RAW / "peers.json"
        peers = json.loads(peers_path.read_text()) if peers_path.exists() else None
        RESULTS.write_text(render(data, peers), encoding="utf-8")
    megatron = RAW / "megatron_train.json"
    if megatron.exists():  # figure 6, rendered by its own script
        import megatron_train

        megatron_train.write_section(json.loads(megatron.read_text()))
    sp_memory = RAW / "sequence_parallel_memory.json"
    if sp_memory.exists():  # figure 7, rendered by its own script
        import sequence_parallel_memory

        sequence_parallel_memory.write_section(json.loads(sp_memory.read_text()))
    media = RAW / "media_latency.json"
    if media.exists():  # figure 8, rendered by its own script
        import media_latency

        media_latency.write_section(json.loads(media.read_text()))
    conversion = RAW / "convert.json"
    if conversion.exists() and "rows" in json.loads(conversion.read_text()):  # figure 9, rendered by its own script
        import convert

        convert.write_section(json.loads(conversion.read_text()))
    rl = RAW / "rl_steps.json"
    if rl.exists():  # figure 10, rendered by its own script
        import rl_steps

        rl_steps.write_section(json.loads(rl.read_text()))
    grpo = RAW / "msswift_grpo.json"
    if grpo.exists():  # figure 11, rendered by its own script
        import msswift_grpo

        msswift_grpo.write_section(json.loads(grpo.read_text()))
    serve = RAW / "serve_compare.json"
    if serve.exists():  # figure 12, rendered by its own script
        import serve_compare

        serve_compare.write_section(json.loads(serve.read_text()))
    scaling_raw = RAW / "scaling.json"
    if scaling_raw.exists():  # figure 13, rendered by its own script (its plots are made when it runs)
        import scaling

        scaling.write_section(json.loads(scaling_raw.read_text()))
    families = RAW / "train_families.json"
    if families.exists():  # figure 14, rendered by its own script
        import train_families

        train_families.write_section(json.loads(families.read_text()))
    profile = RAW / "encode_profile.json"
    if profile.exists():  # figure 15, rendered by its own script
        import encode_profile

        encode_profile.write_section(json.loads(profile.read_text()))
    speculative_raw = RAW / "speculative.json"
    if speculative_raw.exists():  # figure 16, rendered by its own script
        import speculative

        replace_section(speculative.render(json.loads(speculative_raw.read_text())), speculative.BEGIN, speculative.END)
    recipes = RAW / "megatron_recipes.json"
    if recipes.exists():  # figure 18, rendered by its own script
        import megatron_recipes

        megatron_recipes.write_section(json.loads(recipes.read_text()))
    chunked = RAW / "chunked_loss_memory.json"
    logps = RAW / "chunked_logps_memory.json"
    if chunked.exists() or logps.exists():  # figure 17: its script writes raw JSON only
        parts = [json.loads(path.read_text()) for path in (chunked, logps) if path.exists()]
        replace_section(chunked_loss_section(parts), CHUNKED_BEGIN, CHUNKED_END)
    return RESULTS


CHUNKED_BEGIN, CHUNKED_END = "<!-- chunked-loss-memory:begin -->", "<!-- chunked-loss-memory:end -->"


def _chunked_table(data: dict[str, Any]) -> list[str]:
    """One figure-17 table: a row per measured row of ``data`` (SFT rows have ``loss``, DPO/GRPO rows ``method``
    and ``logps``), each non-plain row's step memory against the plain row of the same recipe and length."""
    m = data["machine"]
    model = data.get("model", {})
    rows = data.get("results", [])
    logps = data.get("figure") == "chunked_logps_memory"
    default = "python bench/chunked_loss_memory.py" + (" --logps" if logps else "")
    what = (
        "DPO and GRPO loss steps (forward, loss, backward; no optimiser), the per-token log-probs computed plain "
        "(full logits, `log_softmax`, gather), by TRL's fused LM head (`trl`) or chunked by swiftcore"
        if logps
        else "SFT training steps (forward, loss, backward, AdamW step), the plain loss against the chunked one"
    )
    lines = [
        "",
        f"`{data.get('command', default)}`, {m.get('date', 'n/a')}, {machine_text(m)}. {what}. A Qwen3 with Qwen's "
        f"vocabulary ({model.get('vocab_size', 0):,} tokens) and a tiny body ({model.get('num_hidden_layers', '?')} "
        f"layer, hidden {model.get('hidden_size', '?')}), {data.get('dtype', 'float32')} on the CPU, each row in a "
        "fresh process. Step adds: the process's peak RSS (`VmHWM`) over its RSS right before the step; step seconds "
        "on a shared machine are indicative only.",
        "",
        "| recipe | tokens | log-probs / loss | step adds MB | peak RSS MB | vs plain (step adds) | loss value "
        "| step s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]

    def kind(r: dict[str, Any]) -> str:
        return str(r.get("logps") or r.get("loss") or "n/a")

    def recipe(r: dict[str, Any]) -> str:
        return str(r.get("method") or r.get("recipe") or "sft").upper()

    plain = {(recipe(r), r["tokens"]): r for r in rows if kind(r) == "plain"}
    for r in rows:
        base = plain.get((recipe(r), r["tokens"]))
        ratio = (
            f"{r['step_peak_mb'] / base['step_peak_mb']:.2f}x"
            if kind(r) != "plain" and base and base.get("step_peak_mb")
            else "—"
        )
        name = kind(r) + (f" ({r['chunk_size']} a chunk)" if r.get("chunk_size") else "")
        value = r.get("loss_value")
        shown = "n/a" if value is None else f"{value:.6f}".replace("-0.000000", "0.000000")
        lines.append(
            f"| {recipe(r)} | {r['tokens']} | {name} | {r.get('step_peak_mb', 'n/a')} | {r.get('peak_rss_mb', 'n/a')} "
            f"| {ratio} | {shown} | {r.get('step_seconds', 'n/a')} |"
        )
    if data.get("plain_max_tokens"):
        limit = data["plain_max_tokens"]
        lines += ["", f"The plain way was measured up to {limit} tokens (rows beyond it have no ratio)."]
    return lines


def chunked_loss_section(parts: list[dict[str, Any]]) -> str:
    """Figure 17's RESULTS.md section from ``bench/raw/chunked_loss_memory.json`` (SFT) and
    ``chunked_logps_memory.json`` (DPO / GRPO, ``--logps``), whichever exist: a table each, every row the JSON
    holds."""
    lines = [CHUNKED_BEGIN, "", "## 17. Peak memory of one step: chunked loss / log-probs vs plain"]
    for data in parts:
        lines += _chunked_table(data)
    lines += ["", CHUNKED_END]
    return "\n".join(lines)

if __name__ == "__main__":
    print(write_results())
