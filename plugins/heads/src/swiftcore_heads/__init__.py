"""swiftcore-heads: task heads (classification, embedding, reranker, generative reranker) on any backbone.

Importing this package is cheap: torch and transformers are imported by the functions that need them.
The public functions live in :mod:`swiftcore_heads.api` (inference) and :mod:`swiftcore_heads.recipe`
(training).
"""

from __future__ import annotations

__all__ = ["HEAD_FILE"]

#: The file every head checkpoint carries: task, pooling, labels, how the head was saved.
HEAD_FILE = "swiftcore_head.json"
