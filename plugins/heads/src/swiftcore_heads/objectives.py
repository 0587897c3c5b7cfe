"""The training objective of each task: defaults for the head options, and the loss of one batch."""

from __future__ import annotations

from functools import partial
from typing import Any

from swiftcore_heads.errors import HeadConfigError

__all__ = ["resolve_head_options", "batch_loss", "check_mrl_dims"]

_DEFAULT_LOSS = {"embedding": "infonce", "reranker": "listwise", "generative_reranker": "listwise"}
_PROBLEM_LOSS = {
    "single_label_classification": "cross_entropy",
    "multi_label_classification": "bce",
    "regression": "mse",
}


def resolve_head_options(cfg: Any, head_spec: Any) -> None:
    """Fill the task defaults into ``cfg`` (loss, problem type, temperature) and check them against the head.

    Raises:
        HeadConfigError: an option the head does not support (names the flag and the choices).
    """
    if cfg.task == "classification":
        if cfg.problem_type is None:
            cfg.problem_type = "regression" if cfg.num_labels == 1 else "single_label_classification"
        expected = _PROBLEM_LOSS.get(cfg.problem_type)
        if cfg.loss is None:
            cfg.loss = expected
        elif cfg.loss != expected:
            raise HeadConfigError(f"--loss {cfg.loss} does not fit --problem-type {cfg.problem_type} (use {expected})")
    elif cfg.loss is None:
        cfg.loss = _DEFAULT_LOSS[cfg.task]
    if cfg.loss not in head_spec.losses:
        raise HeadConfigError(
            f"--loss {cfg.loss!r} is not a loss of the {cfg.task} head ({head_spec.provider}); "
            f"choose one of {', '.join(head_spec.losses)}"
        )
    if cfg.pooling not in head_spec.pooling:
        raise HeadConfigError(f"--pooling {cfg.pooling!r}: the {cfg.task} head supports {', '.join(head_spec.pooling)}")
    if cfg.temperature is None:
        cfg.temperature = 0.05 if cfg.loss == "infonce" else 1.0


def batch_loss(outputs: Any, batch: dict[str, Any], cfg: Any) -> Any:
    """The loss of one collated batch (see :class:`swiftcore_heads.data.GroupCollator` for its layout).

    Args:
        outputs: the head model's ``[N, D]`` output for every text of the batch, in collated order.
        batch: the collated batch (``labels``, ``n_groups``, ``group_size``).
        cfg: the training config (loss, temperature, Matryoshka dims and weights).
    """
    import torch

    from swiftcore_heads import losses

    labels = batch["labels"]
    n, group = batch["n_groups"], batch["group_size"]
    if cfg.task == "classification":
        return losses.classification_loss(outputs, labels, cfg.problem_type)
    if cfg.task == "embedding":
        dims = list(cfg.mrl_dims) or [outputs.shape[-1]]
        weights = list(cfg.mrl_weights) or [1.0] * len(dims)
        if cfg.loss == "infonce":
            fn = partial(
                losses.infonce, group_size=group - 1, temperature=cfg.temperature, in_batch=cfg.in_batch_negatives
            )
            return losses.matryoshka(fn, dims, weights, outputs[:n], outputs[n:])
        pair_fn = losses.cosine_similarity_loss if cfg.loss == "cosine_similarity" else losses.contrastive_loss
        return losses.matryoshka(partial(pair_fn, labels=labels), dims, weights, outputs[0::2], outputs[1::2])
    scores = outputs.reshape(-1)
    if cfg.loss == "listwise":
        return losses.listwise_loss(scores, group, cfg.temperature)
    if labels.dtype.is_floating_point:  # labelled (query, document) pairs
        return losses.pointwise_loss(scores, labels)
    targets = torch.zeros(n, group, device=scores.device)
    targets[:, 0] = 1.0  # the positive comes first in every group
    return losses.pointwise_loss(scores, targets.reshape(-1))


def check_mrl_dims(cfg: Any, hidden_size: int, model_dir: str) -> None:
    """Refuse Matryoshka dims above the model's hidden size (before anything is loaded)."""
    too_big = [d for d in cfg.mrl_dims if d > hidden_size]
    if too_big:
        raise HeadConfigError(
            f"--mrl-dims {','.join(map(str, too_big))}: larger than the hidden size {hidden_size} of {model_dir}; "
            f"use dims up to {hidden_size}"
        )
