"""A bundled synthetic retrieval task, and the metrics to score embedding models and rerankers on it.

Each item is a pair of words drawn from a small vocabulary; its query asks for the pair, its
document states it. A model retrieves well only by matching the words across query and document, so
recall@1 starts at chance (1 / number of documents) and rises as the model learns. Train and eval
items are disjoint pairs.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["RetrievalTask", "make_retrieval_task", "recall_at_1", "mean_reciprocal_rank"]

_WORDS = (
    "red", "blue", "green", "gold", "dark", "cold", "warm", "tiny", "vast", "calm",
    "fox", "owl", "cat", "elk", "bee", "ant", "cow", "pig", "hen", "yak",
)  # fmt: skip


class RetrievalTask:
    """Train rows (with hard negatives) and an eval set of queries, documents and the right document per query."""

    def __init__(self, train: list[dict[str, Any]], queries: list[str], documents: list[str]) -> None:
        self.train = train
        self.queries = queries
        self.documents = documents  # documents[i] answers queries[i]

    def write_train(self, path: str | Path) -> Path:
        """Write the train rows as jsonl (``{"query", "positive", "negatives"}``)."""
        path = Path(path)
        path.write_text("".join(json.dumps(r) + "\n" for r in self.train), encoding="utf-8")
        return path


def _query(pair: tuple[str, str]) -> str:
    return f"find {pair[0]} {pair[1]}"


def _document(pair: tuple[str, str]) -> str:
    return f"the {pair[0]} {pair[1]} lives here"


def make_retrieval_task(n_train: int = 80, n_eval: int = 20, n_negatives: int = 1, seed: int = 0) -> RetrievalTask:
    """Build the task: ``n_train`` train rows and ``n_eval`` eval pairs, disjoint.

    Hard negatives share one word with the positive, so matching one word is not enough.
    """
    rng = random.Random(seed)
    pairs = [(a, b) for a in _WORDS[:10] for b in _WORDS[10:]]
    rng.shuffle(pairs)
    if n_train + n_eval > len(pairs):
        raise ValueError(f"n_train + n_eval must be at most {len(pairs)}")
    train_pairs, eval_pairs = pairs[:n_train], pairs[n_train : n_train + n_eval]
    train = []
    for a, b in train_pairs:
        negatives = []
        while len(negatives) < n_negatives:
            other = (a, rng.choice(_WORDS[10:])) if rng.random() < 0.5 else (rng.choice(_WORDS[:10]), b)
            if other != (a, b) and _document(other) not in negatives:
                negatives.append(_document(other))
        train.append({"query": _query((a, b)), "positive": _document((a, b)), "negatives": negatives})
    return RetrievalTask(train, [_query(p) for p in eval_pairs], [_document(p) for p in eval_pairs])


def recall_at_1(query_vectors: Any, doc_vectors: Any) -> float:
    """Fraction of queries whose most similar document (cosine) is their own (row ``i`` answers query ``i``)."""
    import torch
    from torch.nn import functional as F

    sims = F.normalize(query_vectors, dim=-1) @ F.normalize(doc_vectors, dim=-1).T
    return (sims.argmax(dim=1) == torch.arange(len(sims))).float().mean().item()


def mean_reciprocal_rank(
    score_fn: Callable[[Sequence[tuple[str, str]]], list[float]], queries: Sequence[str], documents: Sequence[str]
) -> float:
    """MRR of ``score_fn`` ranking every document for every query (document ``i`` answers query ``i``)."""
    total = 0.0
    for i, query in enumerate(queries):
        scores = score_fn([(query, d) for d in documents])
        rank = 1 + sum(1 for j, s in enumerate(scores) if j != i and s >= scores[i])
        total += 1.0 / rank
    return total / len(queries)
