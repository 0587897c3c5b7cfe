"""Outcome tests for the task heads: trained through the real ``swiftcore train --task ...`` CLI, each head
does better on held-out synthetic data than the model it started from, by a stated margin.

- classification (Qwen3.5 backbone, full tuning): the class is the colour word hidden at a random place
  among filler words; held-out accuracy beats the majority-class baseline by at least 0.4.
- generative reranker (Qwen3.5 backbone, full tuning, the bundled retrieval task): held-out MRR over 20
  documents rises by at least 0.2 above the untrained model's (the same weights: the head adds none).
- the same trained reranker behind ``swiftcore deploy`` (a real server process, POST /v1/rerank with
  httpx): for at least 60 % of held-out queries the positive document comes first among four candidates;
  the served scores are the trained checkpoint's, and the untrained model stays below that bar.
- embedding with ``--tuner lora`` (Gemma 4 backbone, mean pooling): held-out recall@1 over 20 documents
  rises by at least 0.15 above the base model's.

Seeds are fixed and torch runs on one thread (so a run is bit-reproducible whatever the machine's thread
setting; a different thread count changes the float sums and with them the training trajectory). The
margins are at most about half the gains measured on three runs (numbers in each test).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from swiftcore_heads import (
    classify,
    embed,
    load_head_model,
    make_head_checkpoint,
    make_retrieval_task,
    mean_reciprocal_rank,
    recall_at_1,
    score,
)
from swiftcore_testing import deploy_process, run_cli, user_env

COLOURS = ("red", "blue", "green")
FILLER = ("fox", "owl", "cat", "elk", "bee", "ant", "cow", "pig", "hen", "yak", "tiny", "vast", "calm", "cold")
# Generative-reranker prompts are cut from the left to this many tokens: the query, the document and the
# answer position stay (about 45 tokens), the long Qwen3-Reranker system prompt goes; 3x cheaper on a CPU.
RERANK_MAX_LENGTH = 64


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """One torch thread: the same numbers on every run, and faster on a busy 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def plugins() -> Any:
    import swiftcore

    return swiftcore.load_plugins(env={})


def _last_checkpoint(output_dir: Path) -> Path:
    return max(output_dir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))


def _train(model_dir: Path, data: Path, out: Path, *args: str) -> Path:
    run_cli("train", "--model", str(model_dir), "--dataset", str(data), "--output-dir", str(out), "--no-plot",
            "--lr-scheduler", "constant", "--save-steps", "10000", "--logging-steps", "10", "--seed", "0",
            *args)  # fmt: skip
    return _last_checkpoint(out)


# ----------------------------------------------------------------------------------------- classification


def _colour_rows(n: int, rng: random.Random) -> list[dict[str, Any]]:
    """``n`` rows, classes in turn: 3-6 filler words with the class's colour word inserted anywhere."""
    rows = []
    for i in range(n):
        words = [rng.choice(FILLER) for _ in range(rng.randint(3, 6))]
        words.insert(rng.randint(0, len(words)), COLOURS[i % 3])
        rows.append({"text": " ".join(words), "label": i % 3})
    return rows


def test_classification_beats_the_majority_class_on_held_out_texts(tiny_model_dir, tmp_path):
    """Measured (3 runs): 30 held-out texts, majority class 0.33, trained accuracy 1.00 (margin asserted: 0.4)."""
    rng = random.Random(0)
    train, held_out = _colour_rows(120, rng), _colour_rows(30, rng)
    seen = {r["text"] for r in train}
    held_out = [r for r in held_out if r["text"] not in seen]
    data = tmp_path / "colours.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in train))
    ckpt = _train(tiny_model_dir("qwen3_5"), data, tmp_path / "cls", "--task", "classification", "--num-labels", "3",
                  "--tuner", "full", "--learning-rate", "1e-3", "--max-steps", "40", "--batch-size", "8",
                  "--max-length", "32")  # fmt: skip
    model, tokenizer = load_head_model(ckpt)
    labels = torch.tensor([r["label"] for r in held_out])
    predicted = classify(model, tokenizer, [r["text"] for r in held_out]).argmax(dim=-1)
    accuracy = (predicted == labels).float().mean().item()
    majority = labels.bincount().max().item() / len(labels)
    print(f"held-out accuracy {accuracy:.3f}, majority class {majority:.3f} ({len(labels)} texts)")
    assert accuracy >= majority + 0.4


# ----------------------------------------------------------------------------------- generative reranker


@pytest.fixture(scope="module")
def reranker(tiny_model_dir, plugins, tmp_path_factory) -> dict[str, Any]:
    """A generative reranker trained on the bundled retrieval task (3 hard negatives), and its untrained twin."""
    root = tmp_path_factory.mktemp("grr")
    task = make_retrieval_task(seed=0, n_negatives=3)
    data = task.write_train(root / "retrieval3.jsonl")
    model_dir = tiny_model_dir("qwen3_5")
    start = time.perf_counter()
    trained = _train(model_dir, data, root / "out", "--task", "generative_reranker", "--tuner", "full",
                     "--learning-rate", "2e-3", "--max-steps", "60", "--batch-size", "8",
                     "--max-length", str(RERANK_MAX_LENGTH))  # fmt: skip
    seconds = time.perf_counter() - start
    # The head adds no parameters: the untrained reranker is the backbone itself, read the same way.
    untrained = make_head_checkpoint(
        model_dir, "generative_reranker", root / "untrained", plugins, max_length=RERANK_MAX_LENGTH
    )
    return {"task": task, "trained": trained, "untrained": untrained, "train_seconds": seconds}


def test_generative_reranker_raises_held_out_mrr(reranker):
    """Measured (3 runs): MRR 0.177 untrained -> 0.648 trained, 20 held-out queries x 20 documents (asserted: +0.2)."""
    task = reranker["task"]
    mrr = {}
    for name in ("untrained", "trained"):
        model, tokenizer = load_head_model(reranker[name])
        mrr[name] = mean_reciprocal_rank(
            lambda pairs, m=model, t=tokenizer: score(m, t, pairs), task.queries, task.documents
        )
    print(f"[{reranker['train_seconds']:.0f}s training] MRR {mrr['untrained']:.3f} -> {mrr['trained']:.3f}")
    assert mrr["trained"] >= mrr["untrained"] + 0.2


def _candidates(task: Any) -> list[tuple[str, list[str], int]]:
    """Per held-out query: its document and three other held-out documents, shuffled; the positive's index."""
    rng = random.Random(1)
    out = []
    for i, query in enumerate(task.queries):
        docs = [task.documents[i], *rng.sample([d for j, d in enumerate(task.documents) if j != i], 3)]
        order = list(range(4))
        rng.shuffle(order)
        out.append((query, [docs[k] for k in order], order.index(0)))
    return out


@pytest.fixture(scope="module")
def served_reranker(reranker) -> Iterator[str]:
    """``swiftcore deploy`` of the trained reranker's output directory, started as a user starts it."""
    env = user_env(OMP_NUM_THREADS="1")
    args = ("--model", str(reranker["trained"].parent), "--no-api-key")
    with deploy_process(*args, served_model_name="rr", env=env, timeout=180) as (base, _):
        yield base


def test_served_trained_reranker_puts_the_positive_first(reranker, served_reranker):
    """Measured (3 runs): positive first for 0.70 of 20 held-out queries served (untrained 0.25, chance 0.25)."""
    cases = _candidates(reranker["task"])
    model, tokenizer = load_head_model(reranker["trained"])
    first, worst_gap = 0, 0.0
    for query, docs, positive in cases:
        reply = httpx.post(f"{served_reranker}/v1/rerank", json={"model": "rr", "query": query, "documents": docs},
                           timeout=120)  # fmt: skip
        assert reply.status_code == 200, reply.text
        results = reply.json()["results"]
        first += results[0]["index"] == positive
        expected = score(model, tokenizer, [(query, d) for d in docs])
        worst_gap = max(worst_gap, *(abs(r["relevance_score"] - expected[r["index"]]) for r in results))
    served = first / len(cases)

    untrained, tok = load_head_model(reranker["untrained"])
    untrained_first = sum(
        max(range(len(docs)), key=score(untrained, tok, [(q, d) for d in docs]).__getitem__) == positive
        for q, docs, positive in cases
    ) / len(cases)
    print(f"positive first: served trained {served:.2f}, untrained {untrained_first:.2f} (chance 0.25)")
    assert worst_gap < 1e-4  # the server answers with the trained checkpoint's scores
    assert served >= 0.6 > untrained_first


# ------------------------------------------------------------------------------------------ LoRA embedding


def test_lora_embedding_raises_held_out_recall(tiny_model_dir, plugins, tmp_path):
    """Measured (3 runs): recall@1 0.20 base -> 0.45 after LoRA, 20 held-out queries x 20 docs (asserted: +0.15)."""
    task = make_retrieval_task(seed=0)
    data = task.write_train(tmp_path / "retrieval.jsonl")
    model_dir = tiny_model_dir("gemma4")
    trained = _train(model_dir, data, tmp_path / "emb", "--task", "embedding", "--tuner", "lora", "--pooling", "mean",
                     "--learning-rate", "1e-2", "--max-steps", "200", "--batch-size", "8",
                     "--max-length", "32")  # fmt: skip
    base = make_head_checkpoint(model_dir, "embedding", tmp_path / "base", plugins, pooling="mean", max_length=32)
    recall = {}
    for name, ckpt in (("base", base), ("lora", trained)):
        model, tokenizer = load_head_model(ckpt)
        assert model.head_info["pooling"] == "mean"
        recall[name] = recall_at_1(embed(model, tokenizer, task.queries), embed(model, tokenizer, task.documents))
    print(f"recall@1 {recall['base']:.3f} -> {recall['lora']:.3f} (chance {1 / len(task.documents):.2f})")
    assert recall["lora"] >= recall["base"] + 0.15
