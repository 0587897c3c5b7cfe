"""The DPO, KTO and reward-model losses as functions of log-probs / rewards, for trainers other than TRL's (the
megatron engine's ``dpo.megatron``, ``kto.megatron``, ``rm.megatron``).

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

__all__ = ["DPO_METRICS", "KTO_METRICS", "RM_METRICS", "dpo_loss", "kto_loss", "reward_loss"]

#: The metrics :func:`dpo_loss` returns (TRL's names; ``eval_`` is prefixed by the caller for evaluation).
DPO_METRICS = (
    "rewards/chosen",
    "rewards/rejected",
    "rewards/accuracies",
    "rewards/margins",
    "logps/chosen",
    "logps/rejected",
)
#: The metrics :func:`kto_loss` returns (TRL's names; those of a reply kind the batch lacks are left out, as TRL does).
KTO_METRICS = ("kl", "rewards/chosen", "logps/chosen", "rewards/rejected", "logps/rejected", "rewards/margins")
#: The metrics :func:`reward_loss` returns (TRL's names).
RM_METRICS = ("min_reward", "mean_reward", "max_reward", "accuracy", "margin")


class _Gather:
    """What ``_compute_loss`` asks of accelerate: a device, and gathers over ``group`` (None: this rank alone)."""

    def __init__(self, device: Any, group: Any = None) -> None:
        self.device = device
        self.group = group

    def gather_for_metrics(self, tensor: Any) -> Any:
        import torch
        import torch.distributed as dist

        if self.group is None or dist.get_world_size(self.group) == 1:
            return tensor
        tensor = tensor.reshape(1) if tensor.ndim == 0 else tensor.contiguous()  # accelerate gathers scalars as [1]
        parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size(self.group))]
        dist.all_gather(parts, tensor, group=self.group)
        return torch.cat(parts)

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
        accelerator=_Gather(device),
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


def kto_loss(
    per_token_logps: Any,
    completion_mask: Any,
    labels: Any,
    kl_logps: Any,
    ref_logps: Any,
    ref_kl_logps: Any,
    options: Any,
    *,
    training: bool = True,
    group: Any = None,
) -> tuple[Any, dict[str, float]]:
    """TRL 1.16's KTO loss (``KTOTrainer._compute_loss``, run on a stand-in trainer) of one batch of rows.

    Args:
        per_token_logps: ``[B, T-1]`` policy log-probs (the megatron engine's ``row_logps``); the gradient flows.
        completion_mask: ``[B, T]``, 1 on reply tokens.
        labels: ``[B]`` bool, True for desirable replies.
        kl_logps: ``[B]`` the policy's summed log-probs of each prompt with its KL reply (no gradient), or None
            (``apo_zero_unpaired``: no KL term).
        ref_logps: ``[B]`` the reference's summed reply log-probs.
        ref_kl_logps: ``[B]`` the reference's KL-row log-probs, or None.
        options: the ``kto`` recipe's ``KTOOptions``.
        training: TRL's train / eval mode (only the metrics' bookkeeping differs).
        group: the data-parallel process group the KL estimate and metrics are gathered over (None: this rank).

    Returns:
        ``(loss, metrics)``: the batch's loss (mean over its rows, each kind weighted) and the :data:`KTO_METRICS`
        TRL logs for it.
    """
    from collections import defaultdict
    from types import SimpleNamespace

    import torch
    from trl import KTOTrainer

    device = per_token_logps.device
    outputs = SimpleNamespace(
        log_probs=per_token_logps,
        entropy=torch.zeros_like(per_token_logps),
        mean_logits=torch.zeros_like(per_token_logps),
    )
    stand_in = SimpleNamespace(
        model=SimpleNamespace(training=training),
        accelerator=_Gather(device, group),
        calculate_KL=kl_logps is not None,
        aux_loss_enabled=False,
        precompute_ref_logps=True,  # the reference's log-probs are given
        loss_type=options.loss_type,
        beta=options.beta,
        desirable_weight=options.desirable_weight,
        undesirable_weight=options.undesirable_weight,
        _compute_kl_logps=lambda model, batch: kl_logps,
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        _total_train_tokens=0,
        _tp_size=1,
    )
    inputs = {
        "input_ids": torch.zeros_like(completion_mask, dtype=torch.long),
        "attention_mask": torch.ones_like(completion_mask, dtype=torch.long),
        "completion_mask": completion_mask,
        "label": labels,
        "ref_logps": ref_logps,
        "ref_KL_logps": ref_kl_logps,
    }
    loss = KTOTrainer._compute_loss(stand_in, lambda **_: outputs, inputs, False)
    logged = stand_in._metrics["train" if training else "eval"]
    return loss, {name: logged[name][-1] for name in KTO_METRICS if logged.get(name)}


def reward_loss(
    scores: Any, attention_mask: Any, options: Any, *, training: bool = True, group: Any = None
) -> tuple[Any, dict[str, float]]:
    """TRL 1.16's reward-model loss (``RewardTrainer.compute_loss``, run on a stand-in trainer) of one batch of pairs.

    Args:
        scores: ``[2B, 1]`` rewards, rows ``[chosen..., rejected...]`` (the gradient flows through them).
        attention_mask: ``[2B, T]``, the rows' tokens (TRL counts them).
        options: the ``rm`` recipe's ``RMOptions`` (``center_rewards_coefficient``).
        training: TRL's train / eval mode (only the metrics' bookkeeping differs).
        group: the data-parallel process group the metrics are gathered over (None: this rank).

    Returns:
        ``(loss, metrics)``: ``mean(-log σ(r_c - r_r))`` (plus the centring term) and the :data:`RM_METRICS`.
    """
    from collections import defaultdict
    from types import SimpleNamespace

    from trl import RewardTrainer

    stand_in = SimpleNamespace(
        model=SimpleNamespace(training=training),
        accelerator=_Gather(scores.device, group),
        args=SimpleNamespace(center_rewards_coefficient=options.center_rewards_coefficient),
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        _total_train_tokens=0,
        _tp_size=1,
    )
    inputs = {"attention_mask": attention_mask}
    loss = RewardTrainer.compute_loss(stand_in, lambda **_: SimpleNamespace(logits=scores), inputs)
    logged = stand_in._metrics["train" if training else "eval"]
    return loss, {name: logged[name][-1] for name in RM_METRICS}
