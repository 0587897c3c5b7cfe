"""The DPO loss as a function of log-probs, for trainers other than TRL's (the megatron engine's ``dpo.megatron``).

TRL 1.16 has no reusable DPO loss function: the formulas of every ``--loss-type`` sit inside
``DPOTrainer._compute_loss``, after the model's forward. :func:`dpo_loss` runs that very method on log-probs a
caller computed itself, through a stand-in trainer that holds the ``--recipe dpo`` options and a stand-in model that
returns those log-probs, so both engines train with one definition of the loss (TRL's, as the ``dpo`` recipe's
trainer runs it) rather than a copy that could drift from it.

The stand-in fixes what swiftcore's ``dpo`` recipe fixes too: reference log-probs given (as with
``precompute_ref_log_probs``), no length-desensitised ``ld_alpha``, reverse-KL DPO, no WPO weighting, no MoE
auxiliary loss. It computes no entropy, logit or token-accuracy metrics (they would need the logits); the rewards and
log-prob metrics are TRL's own.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DPO_METRICS", "dpo_loss"]

#: The metrics :func:`dpo_loss` returns (TRL's names; ``eval_`` is prefixed by the caller for evaluation).
DPO_METRICS = (
    "rewards/chosen",
    "rewards/rejected",
    "rewards/accuracies",
    "rewards/margins",
    "logps/chosen",
    "logps/rejected",
)


class _Accelerator:
    """What ``_compute_loss`` asks of accelerate: a device, and gathers (the caller reduces across ranks itself)."""

    def __init__(self, device: Any) -> None:
        self.device = device

    @staticmethod
    def gather_for_metrics(tensor: Any) -> Any:
        return tensor

    gather = gather_for_metrics


def dpo_loss(
    per_token_logps: Any,
    completion_mask: Any,
    ref_chosen_logps: Any,
    ref_rejected_logps: Any,
    options: Any,
    *,
    training: bool = True,
) -> tuple[Any, dict[str, float]]:
    """TRL 1.16's DPO loss (``DPOTrainer._compute_loss``) of one batch of pairs, from the policy's log-probs.

    Args:
        per_token_logps: ``[2B, T-1]`` float tensor, rows ``[chosen..., rejected...]`` as TRL's collator lays them
            out: at position ``t`` the policy's log-prob of token ``t+1``, 0 where that token is no reply token.
            The loss's gradient flows through it.
        completion_mask: ``[2B, T]``, 1 on the reply tokens (TRL's ``completion_mask``).
        ref_chosen_logps: ``[B]`` summed reply log-probs of the reference model, chosen replies.
        ref_rejected_logps: ``[B]``, rejected replies.
        options: the ``dpo`` recipe's :class:`~swiftcore_recipe_preference.options.DPOOptions` (``beta``,
            ``loss_type``, ``loss_weights``, ``label_smoothing``).
        training: whether this is a training batch (TRL's train / eval mode; only the metrics' bookkeeping differs).

    Returns:
        ``(loss, metrics)``: the batch's loss (mean over its pairs, each loss type weighted) and the
        :data:`DPO_METRICS` of the batch (means over its pairs).
    """
    from collections import defaultdict
    from dataclasses import fields
    from types import SimpleNamespace

    import torch
    from trl import DPOConfig, DPOTrainer

    device = per_token_logps.device
    outputs = SimpleNamespace(
        log_probs=per_token_logps,
        entropy=torch.zeros_like(per_token_logps),
        mean_logits=torch.zeros_like(per_token_logps),
        is_top1=torch.zeros_like(per_token_logps, dtype=torch.bool),
    )
    loss_types = list(options.loss_type)
    defaults = {f.name: f.default for f in fields(DPOConfig)}
    stand_in = SimpleNamespace(
        model=SimpleNamespace(training=training),
        accelerator=_Accelerator(device),
        aux_loss_enabled=False,
        ld_alpha=None,
        precompute_ref_logps=True,
        f_divergence_type="reverse_kl",
        f_alpha_divergence_coef=defaults["f_alpha_divergence_coef"],
        loss_types=loss_types,
        loss_weights=list(options.loss_weights) or [1.0] * len(loss_types),
        beta=options.beta,
        label_smoothing=options.label_smoothing,
        use_weighting=False,
        args=SimpleNamespace(discopop_tau=defaults["discopop_tau"]),
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        _total_train_tokens=0,
        _tp_size=1,
    )
    inputs = {
        "input_ids": torch.zeros_like(completion_mask, dtype=torch.long),
        "attention_mask": torch.ones_like(completion_mask, dtype=torch.long),
        "completion_mask": completion_mask,
        "ref_chosen_logps": ref_chosen_logps,
        "ref_rejected_logps": ref_rejected_logps,
    }
    loss = DPOTrainer._compute_loss(stand_in, lambda **_: outputs, inputs, False)
    logged = stand_in._metrics["train" if training else "eval"]
    return loss, {name: sum(logged[name]) / len(logged[name]) for name in DPO_METRICS}
