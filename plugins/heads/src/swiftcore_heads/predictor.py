"""``HeadPredictor``: a trained head checkpoint behind the interface ``swiftcore infer`` and the server use.

``HeadSpec.predictor`` names :func:`load_predictor`; core calls it through the registry, so it never
imports this package itself. Numbers come from :mod:`swiftcore_heads.api` (the same functions a
Python user calls), turned into plain lists and dicts.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from swiftcore_heads.errors import HeadCheckpointError, HeadInputError

__all__ = ["HeadPredictor", "load_predictor"]

_DTYPES = ("float32", "bfloat16", "float16")


class HeadPredictor:
    """A loaded head model answering by task: :meth:`embed`, :meth:`classify` or :meth:`score`.

    Args:
        model: a :class:`~swiftcore_heads.model.HeadModel` (``head_info`` set).
        tokenizer: its tokenizer.
        batch_size: texts per forward pass.

    Attributes:
        task: the head's task.
        info: the checkpoint's ``swiftcore_head.json``.
        embedding_dim: the embedding width (embedding heads; None otherwise).
    """

    def __init__(self, model: Any, tokenizer: Any, *, batch_size: int = 16) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.task: str = model.task
        self.info: dict[str, Any] = dict(getattr(model, "head_info", {}) or {})
        self.embedding_dim = model.config.hidden_size if self.task == "embedding" else None

    def _need(self, *tasks: str) -> None:
        if self.task not in tasks:
            raise HeadInputError(f"this is a {self.task} model; {' / '.join(tasks)} models only")

    def count_tokens(self, texts: Sequence[str]) -> int:
        """Tokens the texts take (for usage reports)."""
        return sum(len(self.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts)

    def embed(self, texts: Sequence[str], dimensions: int | None = None) -> list[list[float]]:
        """Embeddings of ``texts``; ``dimensions`` keeps the first N components (Matryoshka) and renormalises.

        Raises:
            HeadInputError: not an embedding model, or ``dimensions`` outside ``[1, embedding_dim]``.
        """
        from swiftcore_heads.api import embed

        self._need("embedding")
        if dimensions is not None and not 0 < dimensions <= self.embedding_dim:
            raise HeadInputError(f"dimensions={dimensions} must be in [1, {self.embedding_dim}]")
        if not texts:
            return []
        return embed(self.model, self.tokenizer, list(texts), dim=dimensions, batch_size=self.batch_size).tolist()

    def classify(self, texts: Sequence[str]) -> list[dict[str, Any]]:
        """One result per text, by problem type.

        - single-label: ``{"label", "label_id", "probabilities": {label: p}}`` (softmax);
        - multi-label: ``{"labels": [labels with p >= 0.5], "probabilities": {label: p}}`` (sigmoid);
        - regression: ``{"value": float}``.

        Labels are the checkpoint's ``id2label`` names, or the class ids as strings.
        """
        import torch

        from swiftcore_heads.api import classify

        self._need("classification")
        if not texts:
            return []
        logits = classify(self.model, self.tokenizer, list(texts), batch_size=self.batch_size)
        problem = self.info.get("problem_type") or (
            "regression" if logits.shape[-1] == 1 else "single_label_classification"
        )
        if problem == "regression":
            return [{"value": float(v)} for v in logits[:, 0]]
        names = self._label_names(logits.shape[-1])
        if problem == "multi_label_classification":
            probs = torch.sigmoid(logits)
            return [
                {
                    "labels": [n for n, p in zip(names, row, strict=True) if p >= 0.5],
                    "probabilities": dict(zip(names, row.tolist(), strict=True)),
                }
                for row in probs
            ]
        probs = torch.softmax(logits, dim=-1)
        return [
            {
                "label": names[int(row.argmax())],
                "label_id": int(row.argmax()),
                "probabilities": dict(zip(names, row.tolist(), strict=True)),
            }
            for row in probs
        ]

    def _label_names(self, n: int) -> list[str]:
        id2label = self.info.get("id2label") or {}
        return [str(id2label.get(str(i), id2label.get(i, i))) for i in range(n)]

    def score(self, query: str, documents: Sequence[str]) -> list[float]:
        """Relevance of each document to ``query`` (higher = more relevant), in the documents' order."""
        from swiftcore_heads.api import score

        self._need("reranker", "generative_reranker")
        if not documents:
            return []
        return score(self.model, self.tokenizer, [(query, d) for d in documents], batch_size=self.batch_size)


def load_predictor(checkpoint_dir: str | Path, *, spec: Any = None, dtype: str = "float32") -> HeadPredictor:
    """Load a head checkpoint for inference (``HeadSpec.predictor``).

    Args:
        checkpoint_dir: a directory with ``swiftcore_head.json`` (``swiftcore train --task`` output checkpoint).
        spec: the HeadSpec that reads it (unused beyond the task check; kept for the contract's signature).
        dtype: ``float32``, ``bfloat16`` or ``float16`` (``auto`` = float32).

    Raises:
        HeadCheckpointError: not a head checkpoint, no tokenizer in it, or the spec's task differs.
    """
    import torch

    from swiftcore_heads.save import load_head_model

    name = "float32" if dtype in (None, "auto") else dtype
    if name not in _DTYPES:
        raise HeadCheckpointError(f"dtype {dtype!r} is not one of {', '.join(_DTYPES)}")
    model, tokenizer = load_head_model(checkpoint_dir, getattr(torch, name))
    if tokenizer is None:
        raise HeadCheckpointError(f"{checkpoint_dir}: no tokenizer saved with the head; save one beside it")
    if spec is not None and spec.task != model.task:
        raise HeadCheckpointError(f"{checkpoint_dir} holds a {model.task} head, not {spec.task} ({spec.name!r})")
    return HeadPredictor(model, tokenizer)
