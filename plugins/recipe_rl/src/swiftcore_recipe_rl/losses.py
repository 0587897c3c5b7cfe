"""The GRPO loss variants TRL 1.16 lacks, as small tensor functions the ``grpo`` trainer applies around TRL's loss.

- :func:`fipo_weights`: FIPO's future-KL influence weights (Ma et al., 2026, "FIPO: Eliciting Deep Reasoning with
  Future-KL Influenced Policy Optimization", arXiv:2603.19835). The trainer multiplies each token's advantage by
  its weight and hands the ``(B, T)`` advantages to TRL's ``dapo`` loss (TRL takes that shape for subclasses).
- :func:`rollout_kl`: the training-inference mismatch, ``KL(engine || trainer)`` over the sampled tokens, logged as
  ``rollout_kl`` when an engine's rollouts are importance-corrected (the correction itself, TIS or MIS, is TRL's).
- :func:`kl_advantages`: on-policy distillation's per-token advantages (``--recipe opd``), the negative reverse-KL
  estimate ``log p_teacher(y_t) - log p_student(y_t)`` of each sampled token (Thinking Machines, "On-Policy
  Distillation", 2025; Agarwal et al., GKD, arXiv:2306.13649, on-policy reverse KL), handed as ``(B, T)`` advantages
  to TRL's loss as FIPO's are.
- :func:`informative_groups`: DAPO's dynamic sampling (Yu et al., 2025, arXiv:2503.14476, eq. 11), filter form: the
  groups whose rewards are not all equal; the trainer leaves the others out of the loss and of its token count.

Everything TRL has (GSPO, CISPO, SAPO, Dr. GRPO, DAPO's token-level loss and clip-higher) stays TRL's; docs/rl.md
lists which is which. Importing this module imports no torch: the functions take tensors and use their methods.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["fipo_weights", "informative_groups", "kl_advantages", "rollout_kl"]


def fipo_weights(
    log_ratio: Any,
    mask: Any,
    advantages: Any,
    *,
    decay_rate: float,
    clip_range: float,
    clip_high_only: bool = True,
    safety_threshold: float = 0.0,
    filter_ratio: float | None = None,
) -> Any:
    """FIPO's influence weight ``f_t`` of each completion token (detached), ``(B, T)``.

    With ``d_t = log pi_theta(y_t) - log pi_old(y_t)`` (``log_ratio``) and ``M_t`` the completion mask::

        FutureKL_t = sum_{k >= t} gamma^(k - t) * M_k * P_k * d_k,      gamma = 2 ** (-1 / decay_rate)
        f_t = clip(exp(FutureKL_t), 1 - clip_range, 1 + clip_range)   ([1, 1 + clip_range] if clip_high_only)
        f_t = clip(f_t, 0.8, 1)   where A_t < 0 and exp(d_t) > safety_threshold   (safety_threshold > 0)

    ``P_k`` is 0 for a token whose ratio exceeds ``filter_ratio`` (``d_k > log filter_ratio``: the dual-clip
    filter; None: no filter). The loss then uses ``A_t * f_t`` in place of ``A_t``: a token whose future the
    update is reinforcing weighs more, one whose future it suppresses less. On the first pass over fresh rollouts
    ``d = 0``, so ``f = 1`` and FIPO is DAPO; it differs from the second pass on (``--num-iterations > 1``) or for
    off-policy rollouts.

    Args:
        log_ratio: ``(B, T)`` current minus old per-token log-probs.
        mask: ``(B, T)`` 1 on the completion tokens the loss counts.
        advantages: ``(B,)`` or ``(B, T)`` advantages (their sign drives the safety clip).
        decay_rate: the future-KL half-life in tokens.
        clip_range: the weight's clipping range.
        clip_high_only: clip to ``[1, 1 + clip_range]``.
        safety_threshold: the ratio above which a negative-advantage token's weight is kept in ``[0.8, 1]``
            (0: off).
        filter_ratio: the ratio above which a token is left out of the future-KL sum (None: none is).
    """
    d = log_ratio.detach() * mask
    if filter_ratio is not None:
        d = d * (log_ratio.detach() <= math.log(filter_ratio))
    gamma = 2.0 ** (-1.0 / decay_rate)
    # FutureKL_t = d_t + gamma * FutureKL_{t+1}: a right-to-left scan, exact (no chunked powers)
    future = d.clone()
    for t in range(d.size(1) - 2, -1, -1):
        future[:, t] = d[:, t] + gamma * future[:, t + 1]
    weights = future.exp().clamp(min=1.0 if clip_high_only else 1.0 - clip_range, max=1.0 + clip_range)
    if safety_threshold > 0:
        adv = advantages if advantages.dim() == 2 else advantages.unsqueeze(1)
        unsafe = (adv < 0) & (log_ratio.detach().exp() > safety_threshold)
        weights = weights.where(~unsafe, weights.clamp(min=0.8, max=1.0))
    return weights * mask


def kl_advantages(
    teacher_logps: Any, student_logps: Any, mask: Any, task_advantages: Any = None, *, reward_weight: float = 0.0
) -> Any:
    """On-policy distillation's advantage of each sampled token, ``(B, T)``, detached::

        A_t = M_t * (log p_teacher(y_t | x, y_<t) - log p_student(y_t | x, y_<t) + reward_weight * A_i)

    The first two terms are the negative single-sample (k1) estimate of the reverse KL(student || teacher) at
    token ``t``: TRL's policy-gradient loss with these advantages lowers the student's reverse KL to the teacher on
    its own samples, token by token (the student's log-prob is a constant here, detached, as in the paper's
    ``advantage = -reverse_kl``). ``A_i`` is the completion's GRPO advantage of the task reward (``reward_weight``
    0: pure distillation).

    Args:
        teacher_logps: ``(B, T)`` the teacher's log-probs of the sampled tokens.
        student_logps: ``(B, T)`` the student's (the policy that sampled them, ``pi_old``).
        mask: ``(B, T)`` 1 on the completion tokens the loss counts.
        task_advantages: ``(B,)`` GRPO's advantages of the task reward (read when ``reward_weight`` is not 0).
        reward_weight: their weight.
    """
    advantages = teacher_logps.detach() - student_logps.detach()
    if reward_weight:
        advantages = advantages + reward_weight * task_advantages.detach().to(advantages.dtype).unsqueeze(1)
    return advantages * mask


def informative_groups(rewards: Any, group_size: int) -> Any:
    """DAPO's dynamic-sampling condition, ``0 < |{o_i : is_equivalent(a, o_i)}| < G`` generalised to any reward:
    a ``(B,)`` bool tensor, True for each completion whose group (``group_size`` consecutive rows) has rewards that
    are not all equal. A group of equal rewards has zero advantage for every member, so it adds nothing to the
    gradient but tokens to the ``dapo`` normaliser, diluting the groups that do carry a signal.

    Args:
        rewards: ``(B,)`` the completions' (weighted) rewards, ``B`` a multiple of ``group_size``; NaN rewards
            (unscorable completions) are left out of the comparison.
        group_size: completions per prompt.
    """
    grouped = rewards.view(-1, group_size)
    filled_max = grouped.nan_to_num(nan=-math.inf).amax(dim=1)
    filled_min = grouped.nan_to_num(nan=math.inf).amin(dim=1)
    return (filled_max > filled_min).repeat_interleave(group_size)


def rollout_kl(trainer_logps: Any, rollout_logps: Any, mask: Any) -> Any:
    """The mismatch between a rollout engine and the trainer: ``KL(mu || pi)`` per completion token, a 0-dim tensor.

    ``mu`` is the engine's sampling distribution (its log-probs of the tokens it sampled, ``rollout_logps``) and
    ``pi`` the trainer's policy on the same tokens (``trainer_logps``, TRL's ``old_per_token_logps``). The tokens were
    drawn from ``mu``, so with ``r_t = pi(y_t) / mu(y_t)`` the k3 estimator::

        rollout_kl = sum_t M_t (r_t - 1 - log r_t) / sum_t M_t

    is an unbiased estimate of ``KL(mu || pi)`` (``E_mu[r] = 1``) and never negative; it is 0 exactly when the two
    agree on every sampled token. Tokens the engine could not score (NaN) are left out.

    Args:
        trainer_logps: ``(B, T)`` the trainer's log-probs of the sampled tokens.
        rollout_logps: ``(B, T)`` the engine's sampling log-probs of them.
        mask: ``(B, T)`` 1 on the completion tokens the loss counts.
    """
    log_ratio = trainer_logps.detach().double() - rollout_logps.detach().double()
    keep = mask.bool() & ~log_ratio.isnan()
    log_ratio = log_ratio.nan_to_num(nan=0.0)
    k3 = (log_ratio.exp() - 1.0 - log_ratio) * keep
    return (k3.sum() / keep.sum().clamp(min=1)).to(trainer_logps.dtype)
