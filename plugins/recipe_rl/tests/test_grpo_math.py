"""GRPO on a fixed batch: advantages and loss equal a reference written from the formulas, and TRL's own code.

The batch: 2 prompts x 4 completions (group size 4) of lengths 1-6, fixed rewards, fixed current and old
per-token log-probs (ratios on both sides of the clipping range), optionally reference log-probs for the KL term.
The reference below is the textbook formula in float64 Python; TRL's is ``GRPOTrainer`` itself
(``_generate_and_score_completions`` for advantages, ``_compute_loss`` for the loss) on a real trainer.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

REWARDS = [1.0, 0.0, 0.5, 0.0, 2.0, 2.0, 1.0, -1.0]
GROUP = 4
LENGTHS = [3, 6, 1, 4, 5, 2, 6, 3]
MAX_COMPLETION = 6  # the trainer's max_completion_length (dr_grpo's constant)
EPS_LOW, EPS_HIGH = 0.2, 0.28


# ------------------------------------------------------------------------------------------------ the reference


def reference_advantages(rewards: list[float], group: int, scale: str) -> list[float]:
    """Group-relative advantages: ``(r - mean_group) / (std + 1e-4)``, std Bessel-corrected (per group, or over
    the batch for ``batch``); ``none`` only centres."""

    def std(values: list[float]) -> float:
        m = sum(values) / len(values)
        return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))

    out = []
    for start in range(0, len(rewards), group):
        g = rewards[start : start + group]
        mean = sum(g) / len(g)
        s = std(rewards) if scale == "batch" else std(g)
        out += [(r - mean) if scale == "none" else (r - mean) / (s + 1e-4) for r in g]
    return out


def reference_loss(
    logps: list[list[float]],
    old: list[list[float]],
    adv: list[float],
    loss_type: str,
    *,
    num_items: float,
    ref: list[list[float]] | None = None,
    beta: float = 0.0,
    bias_correction: bool = True,
) -> float:
    """The clipped surrogate ``-min(rho A, clip(rho, 1-eps_low, 1+eps_high) A)`` per token, plus ``beta`` times the
    k3 KL estimate ``exp(d) - d - 1`` (``d = ref - logp``; times ``rho`` with TRL's default bias correction, which
    makes it the unbiased reverse-KL gradient, DeepSeek-V3.2), then:
    grpo: mean over sequences of the per-sequence token mean; bnpo: token mean over the batch; dr_grpo: token sum
    over (sequences x max_completion_length); dapo: token sum over the generation batch's token count."""
    per_seq = []
    for i, (lp, lo) in enumerate(zip(logps, old, strict=True)):
        tokens = []
        for t, (a, b) in enumerate(zip(lp, lo, strict=True)):
            rho = math.exp(a - b)
            clipped = min(max(rho, 1 - EPS_LOW), 1 + EPS_HIGH)
            loss = -min(rho * adv[i], clipped * adv[i])
            if beta:
                d = ref[i][t] - a  # k3 estimator: exp(d) - d - 1
                loss += beta * (math.exp(d) - d - 1) * (rho if bias_correction else 1.0)
            tokens.append(loss)
        per_seq.append(tokens)
    total = sum(sum(s) for s in per_seq)
    count = sum(len(s) for s in per_seq)
    if loss_type == "grpo":
        return sum(sum(s) / len(s) for s in per_seq) / len(per_seq)
    if loss_type == "bnpo":
        return total / count
    if loss_type == "dr_grpo":
        return total / (len(per_seq) * MAX_COMPLETION)
    if loss_type == "dapo":
        return total / num_items
    raise ValueError(loss_type)


def fixed_logps(offset: float) -> list[list[float]]:
    """Deterministic per-token log-probs, different per sequence and token."""
    return [
        [-1.0 - 0.1 * t - 0.05 * i + offset * math.sin(1.7 * i + t) for t in range(n)] for i, n in enumerate(LENGTHS)
    ]


# ------------------------------------------------------------------------------------------------ TRL's side


def _padded(rows: list[list[float]], torch: Any) -> Any:
    out = torch.zeros(len(rows), max(LENGTHS), dtype=torch.float32)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row)
    return out


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_advantages_equal_the_reference_and_trl(grpo_trainer: Any, scale: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    trainer = grpo_trainer
    monkeypatch.setattr(trainer, "scale_rewards", scale)
    completion_ids = [[100 + t for t in range(n)] for n in LENGTHS]

    def fixed_rollouts(prompts: list) -> tuple:
        prompt_ids = [[1, 29, 30]] * len(prompts)
        return prompt_ids, completion_ids, None, ["c"] * len(prompts), None, {}, None, []

    monkeypatch.setattr(trainer, "_generate", fixed_rollouts)
    trainer.model.train()
    inputs = [{"prompt": "p", "r": r} for r in REWARDS]
    out = trainer._generate_and_score_completions(inputs)
    got = out["advantages"].tolist()
    want = reference_advantages(REWARDS, GROUP, scale)
    diff = max(abs(a - b) for a, b in zip(got, want, strict=True))
    print(f"advantages scale={scale}: max |TRL - reference| = {diff:.2e}")
    assert diff < 1e-5
    assert torch.equal(out["completion_mask"].sum(1), torch.tensor(LENGTHS))


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
@pytest.mark.parametrize(("beta", "bias_correction"), [(0.0, True), (0.04, True), (0.04, False)])
def test_loss_equals_the_reference_and_trl(
    grpo_trainer: Any,
    loss_type: str,
    beta: float,
    bias_correction: bool,
    monkeypatch: pytest.MonkeyPatch,
    fixed_batch: Any,
) -> None:
    import torch

    trainer = grpo_trainer
    logps, old, ref = fixed_logps(0.3), fixed_logps(0.0), fixed_logps(-0.2)
    adv = reference_advantages(REWARDS, GROUP, "group")
    num_items = 2.0 * sum(LENGTHS)  # as if this micro-batch were half of the generation batch
    ratios = [math.exp(x - y) for lp, lo in zip(logps, old, strict=True) for x, y in zip(lp, lo, strict=True)]
    assert min(ratios) < 1 - EPS_LOW and max(ratios) > 1 + EPS_HIGH  # both sides of the clipping are exercised
    current = _padded(logps, torch).requires_grad_(True)
    inputs = fixed_batch(
        advantages=torch.tensor(adv, dtype=torch.float32),
        old_per_token_logps=_padded(old, torch),
        ref_per_token_logps=_padded(ref, torch),
        num_items_in_batch=torch.tensor(num_items),
    )
    mask = inputs["completion_mask"]

    def fixed_logps_and_entropies(model: Any, input_ids: Any, attention_mask: Any, logits_to_keep: int, **kw: Any):
        assert logits_to_keep == max(LENGTHS)
        return current, torch.ones_like(current), None

    values = {
        "_get_per_token_logps_and_entropies": fixed_logps_and_entropies,
        "loss_type": loss_type,
        "beta": beta,
        "epsilon_low": EPS_LOW,
        "epsilon_high": EPS_HIGH,
        "current_gradient_accumulation_steps": 1,
    }
    for name, value in values.items():
        monkeypatch.setattr(trainer, name, value, raising=False)
    monkeypatch.setattr(trainer.args, "use_bias_correction_kl", bias_correction)
    trainer.model.train()
    loss = trainer._compute_loss(trainer.model, inputs)
    want = reference_loss(
        logps, old, adv, loss_type, num_items=num_items, ref=ref, beta=beta, bias_correction=bias_correction
    )
    diff = abs(loss.item() - want)
    print(
        f"loss {loss_type} beta={beta} bias_correction={bias_correction}: "
        f"TRL {loss.item():.6f} reference {want:.6f} |diff| {diff:.2e}"
    )
    assert diff < 1e-5

    # The gradient too: the reference's, by autograd of the same formula on the same log-probs in float64.
    loss.backward()
    lp = _padded(logps, torch).double().requires_grad_(True)
    rho = torch.exp(lp - _padded(old, torch).double())
    a = torch.tensor(adv, dtype=torch.float64)[:, None]
    per_token = -torch.min(rho * a, rho.clamp(1 - EPS_LOW, 1 + EPS_HIGH) * a)
    if beta:
        d = _padded(ref, torch).double() - lp
        per_token = per_token + beta * (torch.exp(d) - d - 1) * (rho if bias_correction else 1.0)
    m = mask.double()
    normaliser = {
        "grpo": None,
        "bnpo": m.sum(),
        "dr_grpo": torch.tensor(8.0 * MAX_COMPLETION, dtype=torch.float64),
        "dapo": torch.tensor(num_items, dtype=torch.float64),
    }[loss_type]
    ref_loss = (
        ((per_token * m).sum(-1) / m.sum(-1)).mean() if normaliser is None else (per_token * m).sum() / normaliser
    )
    ref_loss.backward()
    assert abs(ref_loss.item() - want) < 1e-7  # the log-probs went through float32 on the way
    assert torch.allclose(current.grad.double() * m, lp.grad * m, atol=1e-6)
