"""swiftcore-heads: task heads (classification, embedding, reranker, generative reranker) on any backbone.

Importing this package is cheap: torch and transformers are imported by the functions that need them.
The public functions live in :mod:`swiftcore_heads.api` (inference) and :mod:`swiftcore_heads.recipe`
(training).
"""

from __future__ import annotations

from swiftcore.api import lazy_exports

__all__ = [
    "HEAD_FILE",
    "HeadModel",
    "HeadTrainConfig",
    "build_head_model",
    "classify",
    "embed",
    "forward_texts",
    "load_head_model",
    "make_head_checkpoint",
    "make_retrieval_task",
    "mean_reciprocal_rank",
    "model_texts",
    "recall_at_1",
    "score",
    "texts_to_ids",
    "yes_no_token_ids",
]

#: The file every head checkpoint carries: task, pooling, labels, how the head was saved.
HEAD_FILE = "swiftcore_head.json"

#: name -> the submodule that defines it, imported on first use (importing the package stays light).
_WHERE = {
    "model_texts": "data",
    "texts_to_ids": "data",
    "classify": "api",
    "embed": "api",
    "forward_texts": "api",
    "load_head_model": "api",
    "score": "api",
    "HeadModel": "model",
    "HeadTrainConfig": "options",
    "build_head_model": "recipe",
    "yes_no_token_ids": "recipe",
    "make_retrieval_task": "retrieval",
    "mean_reciprocal_rank": "retrieval",
    "recall_at_1": "retrieval",
    "make_head_checkpoint": "testing",
}
__getattr__ = lazy_exports(__name__, _WHERE)
