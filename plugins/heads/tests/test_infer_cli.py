"""`swiftcore infer` on head checkpoints: flags and JSONL in, JSON lines out, equal to swiftcore_heads.api."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner
from swiftcore_heads.api import embed, load_head_model, score

from swiftcore.cli.main import cli


@pytest.fixture
def run(monkeypatch):
    """``run(*args) -> Result``: the CLI in-process (the plugin set it exports is undone after the test)."""
    monkeypatch.delenv("SWIFTCORE_PLUGINS", raising=False)

    def invoke(*args: str):
        return CliRunner().invoke(cli, ["infer", *args], catch_exceptions=False)

    return invoke


def _lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_embedding_from_flags_with_dimensions(run, head_checkpoint):
    ckpt = head_checkpoint("embedding")
    result = run("--model", str(ckpt), "--text", "a cat", "--text", "tax law", "--dimensions", "8")
    assert result.exit_code == 0, result.output
    rows = _lines(result.stdout)
    model, tokenizer = load_head_model(ckpt)
    expected = embed(model, tokenizer, ["a cat", "tax law"], dim=8)
    assert [r["text"] for r in rows] == ["a cat", "tax law"]
    assert (torch.tensor([r["embedding"] for r in rows]) - expected).abs().max() < 1e-5


def test_reranker_from_flags_sorted_by_score(run, head_checkpoint):
    ckpt = head_checkpoint("reranker")
    docs = ["a cat", "tax law", "a small dog"]
    doc_flags = [arg for d in docs for arg in ("--doc", d)]
    result = run("--model", str(ckpt), "--task", "reranker", "--query", "pets", *doc_flags)
    assert result.exit_code == 0, result.output
    (row,) = _lines(result.stdout)
    model, tokenizer = load_head_model(ckpt)
    expected = score(model, tokenizer, [("pets", d) for d in docs])
    assert [r["index"] for r in row["results"]] == sorted(range(3), key=lambda i: -expected[i])
    assert all(abs(r["score"] - expected[r["index"]]) < 1e-5 and r["document"] == docs[r["index"]]
               for r in row["results"])  # fmt: skip


def test_jsonl_input_with_a_bad_row(run, head_checkpoint, head_labels, tmp_path):
    source = tmp_path / "rows.jsonl"
    source.write_text('{"text": "good news", "id": 1}\n{"txt": "typo"}\nnot json\n{"text": "bad news"}\n')
    result = run("--model", str(head_checkpoint("classification")), "--input", str(source))
    assert result.exit_code == 0, result.output
    assert "answered 2, failed 2" in result.output
    rows = _lines((tmp_path / "rows.out.jsonl").read_text())
    assert len(rows) == 4 and rows[0]["id"] == 1
    assert rows[0]["label"] in head_labels.values() and abs(sum(rows[0]["probabilities"].values()) - 1) < 1e-5
    assert "rows.jsonl:2: field 'text' must be a string" in rows[1]["error"]
    assert "rows.jsonl:3: not valid JSON" in rows[2]["error"]
    assert "label" in rows[3]


def test_task_mismatch_and_misuse_are_clear_errors(run, head_checkpoint, tiny_model_dir):
    from swiftcore.errors import SwiftcoreError

    with pytest.raises(SwiftcoreError, match="holds a 'embedding' head, not 'reranker'"):
        run("--model", str(head_checkpoint("embedding")), "--task", "reranker", "--text", "x")
    with pytest.raises(SwiftcoreError, match="no swiftcore_head.json"):
        run("--model", str(tiny_model_dir("qwen3_5")), "--task", "embedding", "--text", "x")
    result = run("--model", str(head_checkpoint("reranker")), "--text", "x", "--dimensions", "4")
    assert result.exit_code == 2 and "--dimensions is for embedding models" in result.output
    result = run("--model", str(head_checkpoint("reranker")))
    assert result.exit_code == 2 and "--query Q --doc D1" in result.output
    with pytest.raises(SwiftcoreError, match="--backend vllm: not used for head checkpoints"):
        run("--model", str(head_checkpoint("embedding")), "--backend", "vllm", "--text", "x")
