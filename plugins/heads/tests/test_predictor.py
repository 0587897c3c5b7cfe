"""The predictor behind `swiftcore infer --task` and the server: same numbers as swiftcore_heads.api."""

from __future__ import annotations

import json

import pytest
import torch
from swiftcore_heads import HEAD_FILE
from swiftcore_heads.api import classify, embed, load_head_model, score
from swiftcore_infer import (
    HEAD_INFO_FILE,
    HeadCheckpointError,
    InvalidRequestError,
    find_head_checkpoint,
    load_head_engine,
)

TEXTS = ["the cat sat on the mat", "a dog", "tax law of 1999 and its many amendments"]


def test_core_and_plugin_agree_on_the_marker_file():
    assert HEAD_FILE == HEAD_INFO_FILE


def test_embedding_matches_api_and_truncates_with_renormalisation(head_checkpoint, plugins):
    engine = load_head_engine(head_checkpoint("embedding"), plugins)
    model, tokenizer = load_head_model(head_checkpoint("embedding"))
    full = torch.tensor(engine.embed(TEXTS))
    assert (full - embed(model, tokenizer, TEXTS)).abs().max() < 1e-5
    small = torch.tensor(engine.embed(TEXTS, dimensions=8))
    assert small.shape == (3, 8)
    assert torch.allclose(small.norm(dim=-1), torch.ones(3), atol=1e-5)
    # Truncate-then-normalise, not normalise-then-truncate: the direction of the first 8 components.
    expected = torch.nn.functional.normalize(full[:, :8], dim=-1)
    assert (small - expected).abs().max() < 1e-5
    with pytest.raises(InvalidRequestError, match="dimensions"):
        engine.embed(TEXTS, dimensions=engine.embedding_dim + 1)


def test_classification_labels_and_probabilities(head_checkpoint, plugins, head_labels):
    engine = load_head_engine(head_checkpoint("classification"), plugins)
    model, tokenizer = load_head_model(head_checkpoint("classification"))
    probs = torch.softmax(classify(model, tokenizer, TEXTS), dim=-1)
    results = engine.classify(TEXTS)
    for row, p in zip(results, probs, strict=True):
        assert row["label_id"] == int(p.argmax()) and row["label"] == head_labels[row["label_id"]]
        assert list(row["probabilities"]) == list(head_labels.values())
        assert max(abs(a - b) for a, b in zip(row["probabilities"].values(), p.tolist(), strict=True)) < 1e-5


@pytest.mark.parametrize("task", ["reranker", "generative_reranker"])
def test_rerank_order_follows_api_scores(head_checkpoint, plugins, task):
    engine = load_head_engine(head_checkpoint(task), plugins)
    model, tokenizer = load_head_model(head_checkpoint(task))
    expected = score(model, tokenizer, [("which pet?", d) for d in TEXTS])
    ranked = engine.rerank("which pet?", TEXTS)
    assert sorted(i for i, _ in ranked) == [0, 1, 2]
    assert [s for _, s in ranked] == sorted(expected, reverse=True)
    assert all(abs(expected[i] - s) < 1e-5 for i, s in ranked)
    assert engine.rerank("which pet?", TEXTS, top_n=1) == ranked[:1]


def test_task_from_checkpoint_and_mismatch(head_checkpoint, plugins, tmp_path):
    ckpt = head_checkpoint("reranker")
    assert load_head_engine(ckpt, plugins, task="reranker").head_task == "reranker"
    with pytest.raises(HeadCheckpointError, match="holds a 'reranker' head, not 'embedding'.*--task reranker"):
        load_head_engine(ckpt, plugins, task="embedding")
    with pytest.raises(HeadCheckpointError, match="no swiftcore_head.json"):
        load_head_engine(tmp_path, plugins, task="embedding")


def test_output_dir_resolves_to_its_last_head_checkpoint(head_checkpoint, tmp_path):
    for step in (5, 10, 9):
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / HEAD_INFO_FILE).write_text(json.dumps({"task": "embedding"}))
    (tmp_path / "checkpoint-11").mkdir()  # no head file: not a head checkpoint
    assert find_head_checkpoint(tmp_path) == tmp_path / "checkpoint-10"
    assert find_head_checkpoint(head_checkpoint("embedding")) == head_checkpoint("embedding")


def test_a_head_refuses_other_tasks_work(head_checkpoint, plugins):
    engine = load_head_engine(head_checkpoint("embedding"), plugins)
    with pytest.raises(InvalidRequestError, match="embedding model.*/v1/embeddings"):
        engine.score("q", ["d"])
    with pytest.raises(InvalidRequestError, match="embedding model"):
        engine.generate_requests([])


def test_a_head_without_predictor_cannot_be_served(head_checkpoint, plugins, monkeypatch):
    from dataclasses import replace

    spec = plugins.registry.get("head", "embedding")
    get = plugins.registry.get
    monkeypatch.setattr(
        plugins.registry, "get", lambda kind, name: replace(spec, predictor=None) if kind == "head" else get(kind, name)
    )
    with pytest.raises(HeadCheckpointError, match="declares no predictor"):
        load_head_engine(head_checkpoint("embedding"), plugins)


def test_multi_label_and_regression_results(head_checkpoint, head_labels, tiny_model_dir, plugins, tmp_path):
    from swiftcore_heads.predictor import load_predictor
    from swiftcore_heads.testing import make_head_checkpoint

    predictor = load_predictor(head_checkpoint("classification"))
    predictor.info["problem_type"] = "multi_label_classification"
    probs = torch.sigmoid(classify(predictor.model, predictor.tokenizer, TEXTS))
    for row, p in zip(predictor.classify(TEXTS), probs, strict=True):
        assert row["labels"] == [head_labels[i] for i in range(3) if p[i] >= 0.5]
        assert max(abs(a - b) for a, b in zip(row["probabilities"].values(), p.tolist(), strict=True)) < 1e-5

    ckpt = make_head_checkpoint(tiny_model_dir("qwen3_5"), "classification", tmp_path / "reg", plugins, num_labels=1)
    regression = load_predictor(ckpt)
    logits = classify(regression.model, regression.tokenizer, TEXTS)[:, 0].tolist()
    values = [r["value"] for r in regression.classify(TEXTS)]
    assert len(values) == len(TEXTS) and max(abs(a - b) for a, b in zip(values, logits, strict=True)) < 1e-6
