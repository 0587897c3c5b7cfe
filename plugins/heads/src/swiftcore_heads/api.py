"""Inference with a head model: embeddings, classification logits and reranker scores.

These are the functions the inference backends and the OpenAI-compatible server call
(``swiftcore infer --task ...``, ``/v1/embeddings``, ``/v1/rerank``)::

    from swiftcore_heads.api import load_head_model, embed, score, classify

    model, tokenizer = load_head_model("out/checkpoint-100")
    vectors = embed(model, tokenizer, ["a text", "another"])          # [2, D], L2-normalised
    scores = score(model, tokenizer, [("query", "doc 1"), ("query", "doc 2")])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from swiftcore_heads.save import load_head_model, read_head_info

__all__ = ["load_head_model", "read_head_info", "embed", "classify", "score", "forward_texts"]


def forward_texts(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str],
    *,
    batch_size: int = 16,
    max_length: int | None = None,
    templated: bool = False,
) -> Any:
    """Run ``model`` (a :class:`~swiftcore_heads.model.HeadModel`) over ``texts`` in right-padded batches.

    Args:
        model: the head model.
        tokenizer: its tokenizer.
        texts: the texts, as the model reads them.
        batch_size: texts per forward pass.
        max_length: truncate longer texts (default: the checkpoint's training ``max_length``).
        templated: the texts are already rendered prompts (no special tokens added).

    Returns:
        float32 tensor ``[len(texts), D]`` on the CPU.
    """
    import torch
    from swiftcore_data import PaddingCollator

    from swiftcore_heads.data import texts_to_ids

    info = getattr(model, "head_info", {}) or {}
    max_length = max_length or info.get("max_length") or 512
    device = next(model.parameters()).device
    collate = PaddingCollator(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0)
    out = []
    with torch.inference_mode():
        for start in range(0, len(texts), batch_size):
            ids = texts_to_ids(tokenizer, texts[start : start + batch_size], max_length, templated=templated)
            batch = collate([{"input_ids": t} for t in ids])
            out.append(model(batch["input_ids"].to(device), attention_mask=batch["attention_mask"].to(device)).float())
    return torch.cat(out).cpu()


def embed(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str],
    *,
    dim: int | None = None,
    normalize: bool | None = None,
    **kw: Any,
) -> Any:
    """Embeddings of ``texts``: pooled, truncated to ``dim`` (Matryoshka), L2-normalised as the checkpoint says.

    Args:
        model: an embedding head model (:func:`load_head_model`).
        tokenizer: its tokenizer.
        texts: the texts.
        dim: keep the first ``dim`` components (for MRL-trained models), then normalise.
        normalize: override the checkpoint's ``normalize`` setting.
        **kw: :func:`forward_texts` options (``batch_size``, ``max_length``).

    Returns:
        float32 tensor ``[len(texts), dim or hidden]``.
    """
    from torch.nn import functional as F

    vectors = forward_texts(model, tokenizer, texts, **kw)
    if dim is not None:
        vectors = vectors[:, :dim]
    info = getattr(model, "head_info", {}) or {}
    if normalize if normalize is not None else info.get("normalize", True):
        vectors = F.normalize(vectors, dim=-1)
    return vectors


def classify(model: Any, tokenizer: Any, texts: Sequence[str], **kw: Any) -> Any:
    """Classification logits ``[len(texts), num_labels]`` (apply softmax / sigmoid as the problem type says)."""
    return forward_texts(model, tokenizer, texts, **kw)


def score(
    model: Any, tokenizer: Any, pairs: Sequence[tuple[str, str]], *, instruction: str | None = None, **kw: Any
) -> list[float]:
    """Relevance scores of ``(query, document)`` pairs from a reranker or generative reranker (higher = better).

    Args:
        model: a ``reranker`` or ``generative_reranker`` head model.
        tokenizer: its tokenizer.
        pairs: the (query, document) pairs.
        instruction: the generative reranker's instruction (default: the one it was trained with).
        **kw: :func:`forward_texts` options.

    Returns:
        One float per pair (a logit: ``logit(yes) - logit(no)`` for the generative reranker).
    """
    from swiftcore_heads.data import generative_prompt, pair_text

    info = getattr(model, "head_info", {}) or {}
    if model.task == "generative_reranker":
        instruction = instruction or info.get("instruction")
        texts = [generative_prompt(tokenizer, q, d, instruction) for q, d in pairs]
        return forward_texts(model, tokenizer, texts, templated=True, **kw).reshape(-1).tolist()
    return forward_texts(model, tokenizer, [pair_text(q, d) for q, d in pairs], **kw)[:, 0].tolist()
