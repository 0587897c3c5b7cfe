"""Fast checks of the benchmark helpers (no ms-swift, no model): ``python -m pytest bench/test_bench.py``."""

from __future__ import annotations

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
