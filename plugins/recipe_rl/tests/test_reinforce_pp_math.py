"""REINFORCE++ on a fixed batch: advantages and loss equal a reference written from the formulas.

The batch is GRPO's (2 prompts x 4 completions, lengths 1-6, fixed rewards; see test_grpo_math), with fixed
policy (``old``) and reference (``ref``) log-probs of the rollouts. The reference is REINFORCE++ as the paper
(Hu et al., 2025, arXiv:2501.03262) and OpenRLHF define it, in float64 Python: per-token reward
``-beta (old - ref)`` plus the scalar reward on the last token, returns summed to the end (gamma 1), advantages
normalised over every token of the batch; REINFORCE++-baseline subtracts the group-mean reward first. TRL has no
such trainer; the side under test is ``SwiftReinforcePPTrainer`` (TRL's GRPOTrainer with these advantages), its
``_generate_and_score_completions`` and TRL's own ``_compute_loss``.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

# GRPO's fixed batch (test_grpo_math.py; repeated here: test modules are not importable by name).
REWARDS = [1.0, 0.0, 0.5, 0.0, 2.0, 2.0, 1.0, -1.0]
GROUP = 4
LENGTHS = [3, 6, 1, 4, 5, 2, 6, 3]
EPS_LOW, EPS_HIGH = 0.2, 0.28  # the trainer's clipping range


def fixed_logps(offset: float) -> list[list[float]]:
    """Deterministic per-token log-probs, different per sequence and token."""
    return [
        [-1.0 - 0.1 * t - 0.05 * i + offset * math.sin(1.7 * i + t) for t in range(n)] for i, n in enumerate(LENGTHS)
    ]


def _padded(rows: list[list[float]], torch: Any) -> Any:
    out = torch.zeros(len(rows), max(LENGTHS), dtype=torch.float32)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row)
    return out


def reference_advantages(
    rewards: list[float], group: int, *, baseline: bool, beta: float, old: list[list[float]], ref: list[list[float]]
) -> list[list[float]]:
    """REINFORCE++(-baseline) token advantages, one list per completion."""
    if baseline:
        means = [sum(rewards[s : s + group]) / group for s in range(0, len(rewards), group)]
        rewards = [r - means[i // group] for i, r in enumerate(rewards)]
    returns = []
    for r, lo, lf in zip(rewards, old, ref, strict=True):
        per_token = [-beta * (o - f) for o, f in zip(lo, lf, strict=True)]
        per_token[-1] += r
        returns.append([sum(per_token[t:]) for t in range(len(per_token))])
    flat = [g for row in returns for g in row]
    mean = sum(flat) / len(flat)
    var = sum((g - mean) ** 2 for g in flat) / len(flat)
    scale = 1 / math.sqrt(max(var, 1e-8))
    return [[(g - mean) * scale for g in row] for row in returns]


def reference_loss(logps: list[list[float]], old: list[list[float]], adv: list[list[float]], num_items: float) -> float:
    """PPO's clipped per-token surrogate ``-min(rho A_t, clip(rho, 1 - eps_low, 1 + eps_high) A_t)``, summed over the
    tokens and divided by the generation batch's token count (the token-level mean; no KL term: it is in the
    returns)."""
    total = 0.0
    for lp, lo, a in zip(logps, old, adv, strict=True):
        for x, y, at in zip(lp, lo, a, strict=True):
            rho = math.exp(x - y)
            total += -min(rho * at, min(max(rho, 1 - EPS_LOW), 1 + EPS_HIGH) * at)
    return total / num_items


@pytest.mark.parametrize(("baseline", "beta"), [(True, 0.0), (True, 0.05), (False, 0.05)])
def test_reinforce_pp_advantages_equal_the_reference(
    reinforce_pp_trainer: Any, baseline: bool, beta: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    trainer = reinforce_pp_trainer
    old, ref = fixed_logps(0.3), fixed_logps(-0.2)
    completion_ids = [[100 + t for t in range(n)] for n in LENGTHS]

    def fixed_rollouts(prompts: list) -> tuple:
        return [[1, 29, 30]] * len(prompts), completion_ids, None, ["c"] * len(prompts), None, {}, None, []

    def reference_logps(model: Any, input_ids: Any, attention_mask: Any, logits_to_keep: int, *a: Any, **kw: Any):
        return _padded(ref, torch), None, None  # TRL's only call here: the reference model's (adapter off)

    monkeypatch.setattr(trainer, "_generate", fixed_rollouts)
    monkeypatch.setattr(trainer, "_get_per_token_logps_and_entropies", reference_logps)
    monkeypatch.setattr(trainer, "_rollout_logps", lambda out: _padded(old, torch))
    monkeypatch.setattr(trainer, "kl_coef", beta)
    monkeypatch.setattr(trainer, "baseline", baseline)
    trainer.model.train()
    out = trainer._generate_and_score_completions([{"prompt": "p", "r": r} for r in REWARDS])
    assert trainer.beta == 0.0 and "ref_per_token_logps" not in out  # the KL is in the returns, not the loss
    got = out["advantages"]
    assert got.shape == (8, max(LENGTHS))
    want = reference_advantages(REWARDS, GROUP, baseline=baseline, beta=beta, old=old, ref=ref)
    diff = max(abs(got[i, t].item() - w) for i, row in enumerate(want) for t, w in enumerate(row))
    print(f"reinforce_pp advantages baseline={baseline} beta={beta}: max |ours - reference| = {diff:.2e}")
    assert diff < 1e-5
    mask = out["completion_mask"].bool()
    assert torch.equal(got[~mask], torch.zeros_like(got[~mask]))  # padding carries no advantage
    flat = got[mask].double()
    assert abs(flat.mean().item()) < 1e-6 and abs(flat.var(unbiased=False).item() - 1) < 1e-5  # globally normalised


def test_reinforce_pp_loss_equals_the_reference(
    reinforce_pp_trainer: Any, monkeypatch: pytest.MonkeyPatch, fixed_batch: Any
) -> None:
    import torch

    trainer = reinforce_pp_trainer
    logps, old, ref = fixed_logps(0.3), fixed_logps(0.0), fixed_logps(-0.2)
    adv = reference_advantages(REWARDS, GROUP, baseline=True, beta=0.05, old=old, ref=ref)
    num_items = 2.0 * sum(LENGTHS)  # as if this micro-batch were half of the generation batch
    ratios = [math.exp(x - y) for lp, lo in zip(logps, old, strict=True) for x, y in zip(lp, lo, strict=True)]
    assert min(ratios) < 1 - EPS_LOW and max(ratios) > 1 + EPS_HIGH
    current = _padded(logps, torch).requires_grad_(True)

    def fixed_logps_and_entropies(model: Any, input_ids: Any, attention_mask: Any, logits_to_keep: int, **kw: Any):
        return current, torch.ones_like(current), None

    monkeypatch.setattr(trainer, "_get_per_token_logps_and_entropies", fixed_logps_and_entropies)
    monkeypatch.setattr(trainer, "current_gradient_accumulation_steps", 1, raising=False)
    inputs = fixed_batch(
        advantages=_padded(adv, torch),
        old_per_token_logps=_padded(old, torch),
        num_items_in_batch=torch.tensor(num_items),
    )
    mask = inputs["completion_mask"]
    trainer.model.train()
    assert trainer.loss_type == "dapo" and trainer.epsilon_high == EPS_HIGH
    loss = trainer._compute_loss(trainer.model, inputs)
    want = reference_loss(logps, old, adv, num_items)
    diff = abs(loss.item() - want)
    print(f"reinforce_pp loss: ours {loss.item():.6f} reference {want:.6f} |diff| {diff:.2e}")
    assert diff < 1e-5

    loss.backward()
    lp = _padded(logps, torch).double().requires_grad_(True)
    rho = torch.exp(lp - _padded(old, torch).double())
    a = _padded(adv, torch).double()
    m = mask.double()
    ref_loss = (-torch.min(rho * a, rho.clamp(1 - EPS_LOW, 1 + EPS_HIGH) * a) * m).sum() / num_items
    ref_loss.backward()
    assert abs(ref_loss.item() - want) < 1e-6
    assert torch.allclose(current.grad.double() * m, lp.grad * m, atol=1e-6)


def test_reinforce_pp_advantages_function_baseline_and_unscorable_rows() -> None:
    """``reinforce_pp_advantages`` alone: its own group baseline equals the reference, and a completion no reward
    could score (NaN) gets zero advantages and stays out of the statistics."""
    import torch
    from swiftcore_recipe_rl.trainer import reinforce_pp_advantages

    old, ref = fixed_logps(0.3), fixed_logps(-0.2)
    mask = (torch.arange(max(LENGTHS))[None, :] < torch.tensor(LENGTHS)[:, None]).long()
    got = reinforce_pp_advantages(
        torch.tensor(REWARDS), mask, num_generations=GROUP, baseline=True, beta=0.05,
        old_logps=_padded(old, torch), ref_logps=_padded(ref, torch),
    )  # fmt: skip
    want = reference_advantages(REWARDS, GROUP, baseline=True, beta=0.05, old=old, ref=ref)
    assert max(abs(got[i, t].item() - w) for i, row in enumerate(want) for t, w in enumerate(row)) < 1e-5

    rewards = torch.tensor([*REWARDS[:7], float("nan")])
    got = reinforce_pp_advantages(rewards, mask, num_generations=GROUP, baseline=False)
    assert torch.equal(got[7], torch.zeros_like(got[7]))
    want = reference_advantages(REWARDS[:7], GROUP, baseline=False, beta=0.0, old=old[:7], ref=ref[:7])
    assert max(abs(got[i, t].item() - w) for i, row in enumerate(want) for t, w in enumerate(row)) < 1e-5
