"""Hook implementations of swiftcore-heads: the four lm_heads, as plain data."""

from __future__ import annotations

from swiftcore import HeadSpec, hookimpl

SWIFTCORE_API = "1.0"

_PKG = "swiftcore_heads"


@hookimpl
def swiftcore_register_lm_heads() -> list[HeadSpec]:
    """classification, embedding, reranker and generative_reranker; one implementation for every backbone."""
    return [
        HeadSpec(
            name="classification",
            task="classification",
            factory=f"{_PKG}.recipe:run_head_training",
            pooling=("last", "mean"),
            losses=("cross_entropy", "bce", "mse"),
            saved_as="transformers-sequence-classification",
            description="sequence classification / regression / multi-label: pooled token -> score layer",
        ),
        HeadSpec(
            name="embedding",
            task="embedding",
            factory=f"{_PKG}.recipe:run_head_training",
            pooling=("last", "mean"),
            losses=("infonce", "cosine_similarity", "contrastive"),
            saved_as="sentence-transformers",
            description="text embeddings (last/mean pooling, L2 norm, InfoNCE, Matryoshka)",
        ),
        HeadSpec(
            name="reranker",
            task="reranker",
            factory=f"{_PKG}.recipe:run_head_training",
            pooling=("last", "mean"),
            losses=("listwise", "pointwise"),
            saved_as="transformers-sequence-classification",
            description="cross-encoder reranker: (query, document) -> relevance score from a score layer",
        ),
        HeadSpec(
            name="generative_reranker",
            task="generative_reranker",
            factory=f"{_PKG}.recipe:run_head_training",
            pooling=("last",),
            losses=("listwise", "pointwise"),
            saved_as="transformers-causal-lm",
            description="Qwen3-Reranker style: logit('yes') - logit('no') at the last position, no new parameters",
        ),
    ]
