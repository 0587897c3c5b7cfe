"""Loss functions of the heads; each takes the model's pooled outputs and the batch's targets.

Embedding losses get raw (unnormalised) query/document embeddings and normalise them themselves,
so Matryoshka training (:func:`matryoshka`) can truncate first and normalise each truncated prefix.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.nn import functional as F

__all__ = [
    "EMBEDDING_LOSSES",
    "RERANKER_LOSSES",
    "CLASSIFICATION_PROBLEMS",
    "classification_loss",
    "infonce",
    "cosine_similarity_loss",
    "contrastive_loss",
    "matryoshka",
    "listwise_loss",
    "pointwise_loss",
]

EMBEDDING_LOSSES = ("infonce", "cosine_similarity", "contrastive")
RERANKER_LOSSES = ("listwise", "pointwise")
CLASSIFICATION_PROBLEMS = ("single_label_classification", "multi_label_classification", "regression")


def classification_loss(logits: Any, labels: Any, problem_type: str) -> Any:
    """Cross-entropy (single label), BCE-with-logits (multi-label) or MSE (regression), as transformers does."""
    if problem_type == "regression":
        if logits.shape[-1] == 1:
            return F.mse_loss(logits.squeeze(-1), labels.to(logits.dtype).reshape(-1))
        return F.mse_loss(logits, labels.to(logits.dtype))
    if problem_type == "multi_label_classification":
        return F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))
    return F.cross_entropy(logits, labels.long().reshape(-1))


def infonce(query: Any, docs: Any, *, group_size: int, temperature: float = 0.05, in_batch: bool = True) -> Any:
    """InfoNCE over each query's positive, its hard negatives and (optionally) every other query's documents.

    Args:
        query: ``[B, D]`` query embeddings.
        docs: ``[B * group_size, D]``: for query ``i``, rows ``i*group_size`` (the positive) to
            ``(i+1)*group_size - 1`` (its hard negatives).
        group_size: 1 + hard negatives per query.
        temperature: the softmax temperature on cosine similarities.
        in_batch: use the other queries' documents as extra negatives.
    """
    q = F.normalize(query, dim=-1)
    d = F.normalize(docs, dim=-1)
    batch = q.shape[0]
    positives = torch.arange(batch, device=q.device) * group_size
    if in_batch:
        logits = q @ d.T / temperature  # [B, B*G]; the target is each query's own positive
        return F.cross_entropy(logits, positives)
    own = d.reshape(batch, group_size, -1)
    logits = torch.einsum("bd,bgd->bg", q, own) / temperature
    return F.cross_entropy(logits, torch.zeros(batch, dtype=torch.long, device=q.device))


def cosine_similarity_loss(a: Any, b: Any, labels: Any) -> Any:
    """MSE between cos(a, b) and the target similarity in ``labels`` (sentence-transformers' CosineSimilarityLoss)."""
    cos = F.cosine_similarity(a, b, dim=-1)
    return F.mse_loss(cos, labels.to(cos.dtype))


def contrastive_loss(a: Any, b: Any, labels: Any, margin: float = 0.5) -> Any:
    """Pull similar pairs (label 1) together, push dissimilar ones (label 0) beyond ``margin`` cosine distance."""
    distance = 1.0 - F.cosine_similarity(a, b, dim=-1)
    labels = labels.to(distance.dtype)
    losses = labels * distance.pow(2) + (1 - labels) * F.relu(margin - distance).pow(2)
    return 0.5 * losses.mean()


def matryoshka(
    loss_fn: Callable[..., Any], dims: Sequence[int], weights: Sequence[float], *embeddings: Any, **kwargs: Any
) -> Any:
    """Weighted sum of ``loss_fn`` over the first ``dim`` components of every embedding (Matryoshka, MRL).

    The loss functions normalise their inputs, so each prefix is normalised on its own.
    """
    total = 0.0
    for dim, weight in zip(dims, weights, strict=True):
        total = total + weight * loss_fn(*(e[..., :dim] for e in embeddings), **kwargs)
    return total


def listwise_loss(scores: Any, group_size: int, temperature: float = 1.0) -> Any:
    """Softmax cross-entropy over groups of one positive (first) and ``group_size - 1`` negatives."""
    grouped = scores.reshape(-1, group_size) / temperature
    return F.cross_entropy(grouped, torch.zeros(grouped.shape[0], dtype=torch.long, device=grouped.device))


def pointwise_loss(scores: Any, labels: Any) -> Any:
    """Binary cross-entropy with logits of each (query, document) score against its 0/1 label."""
    return F.binary_cross_entropy_with_logits(scores.reshape(-1), labels.to(scores.dtype).reshape(-1))
