"""RLOO on a fixed batch: advantages and loss equal a reference written from the formulas, and TRL's RLOOTrainer.

The batch is GRPO's (2 prompts x 4 completions, lengths 1-6, fixed rewards; see test_grpo_math). The rollouts'
log-probs under the policy (``old``) and the reference (``ref``) are fixed, so the KL penalty in the reward is
known. The reference is the RLOO paper's formulas (Ahmadian et al., 2024) as TRL 1.16 documents them, in float64
Python; TRL's side is ``SwiftRLOOTrainer`` itself (``_generate_and_score_completions``, ``_compute_loss``).
"""

from __future__ import annotations

import math
from typing import Any

import pytest

# GRPO's fixed batch (test_grpo_math.py; repeated here: test modules are not importable by name).
REWARDS = [1.0, 0.0, 0.5, 0.0, 2.0, 2.0, 1.0, -1.0]
GROUP = 4
LENGTHS = [3, 6, 1, 4, 5, 2, 6, 3]
EPS = 0.2  # the trainer's clipping range: [1 - 0.2, 1 + 0.2]


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


def reference_rloo_advantages(
    rewards: list[float], group: int, *, beta: float, old: list[list[float]], ref: list[list[float]], normalize: bool
) -> list[float]:
    """``r_i' = r_i - beta * sum_t (old_t - ref_t)`` (the sequence KL, first-order), then the leave-one-out
    advantage ``A_i = r_i' - mean_{j != i} r_j'`` within each prompt's group; ``normalize``: then
    ``(A - mean(A)) / (std(A) + 1e-4)`` over the batch (std Bessel-corrected)."""
    kl = [sum(o - f for o, f in zip(lo, lf, strict=True)) for lo, lf in zip(old, ref, strict=True)]
    shaped = [r - beta * k for r, k in zip(rewards, kl, strict=True)]
    adv = []
    for start in range(0, len(shaped), group):
        g = shaped[start : start + group]
        adv += [r - (sum(g) - r) / (len(g) - 1) for r in g]
    if normalize:
        mean = sum(adv) / len(adv)
        std = math.sqrt(sum((a - mean) ** 2 for a in adv) / (len(adv) - 1))
        adv = [(a - mean) / (std + 1e-4) for a in adv]
    return adv


def reference_rloo_loss(logps: list[list[float]], old: list[list[float]], adv: list[float]) -> float:
    """The sequence-level clipped surrogate: ``rho_i = exp(sum_t logp - sum_t old)``, loss
    ``mean_i -min(rho_i A_i, clip(rho_i, 1 - eps, 1 + eps) A_i)``."""
    total = 0.0
    for lp, lo, a in zip(logps, old, adv, strict=True):
        rho = math.exp(sum(lp) - sum(lo))
        total += -min(rho * a, min(max(rho, 1 - EPS), 1 + EPS) * a)
    return total / len(adv)


@pytest.mark.parametrize(("beta", "normalize"), [(0.0, False), (0.05, False), (0.05, True)])
def test_rloo_advantages_equal_the_reference_and_trl(
    rloo_trainer: Any, beta: float, normalize: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    trainer = rloo_trainer
    old, ref = fixed_logps(0.3), fixed_logps(-0.2)
    completion_ids = [[100 + t for t in range(n)] for n in LENGTHS]
    calls: list[str] = []

    def fixed_rollouts(prompts: list) -> tuple:
        return [[1, 29, 30]] * len(prompts), completion_ids, ["c"] * len(prompts)

    def fixed_logps_of(model: Any, input_ids: Any, attention_mask: Any, logits_to_keep: int, *a: Any, **kw: Any):
        calls.append("old" if not calls else "ref")  # TRL asks for the policy's, then the reference's
        return _padded(old if len(calls) == 1 else ref, torch), None, None

    monkeypatch.setattr(trainer, "_generate", fixed_rollouts)
    monkeypatch.setattr(trainer, "_get_per_token_logps_and_entropies", fixed_logps_of)
    monkeypatch.setattr(trainer, "beta", beta)
    monkeypatch.setattr(trainer, "normalize_advantages", normalize)
    trainer.model.train()
    out = trainer._generate_and_score_completions([{"prompt": "p", "r": r} for r in REWARDS])
    assert calls == (["old", "ref"] if beta else ["old"])
    got = out["advantages"].tolist()
    want = reference_rloo_advantages(REWARDS, GROUP, beta=beta, old=old, ref=ref, normalize=normalize)
    diff = max(abs(a - b) for a, b in zip(got, want, strict=True))
    print(f"rloo advantages beta={beta} normalize={normalize}: max |TRL - reference| = {diff:.2e}")
    assert diff < 1e-5
    assert torch.allclose(out["old_logps"], torch.tensor([sum(x) for x in old]), atol=1e-5)


def test_rloo_loss_equals_the_reference_and_trl(
    rloo_trainer: Any, monkeypatch: pytest.MonkeyPatch, fixed_batch: Any
) -> None:
    import torch

    trainer = rloo_trainer
    # Sequence ratios on both sides of the clipping range: the current log-probs differ from the old ones by a
    # per-sequence shift.
    old = fixed_logps(0.0)
    shifts = [0.5, -0.4, 0.05, 0.3, -0.6, 0.1, -0.02, 0.4]
    logps = [[x + s / len(row) for x in row] for row, s in zip(old, shifts, strict=True)]
    adv = reference_rloo_advantages(REWARDS, GROUP, beta=0.0, old=old, ref=old, normalize=False)
    ratios = [math.exp(s) for s in shifts]
    clipped_low = [r < 1 - EPS and a < 0 for r, a in zip(ratios, adv, strict=True)]
    clipped_high = [r > 1 + EPS and a > 0 for r, a in zip(ratios, adv, strict=True)]
    assert any(clipped_low) and any(clipped_high)  # both sides of the clipping are exercised
    current = _padded(logps, torch).requires_grad_(True)

    def fixed_logps_and_entropies(model: Any, input_ids: Any, attention_mask: Any, logits_to_keep: int, **kw: Any):
        assert logits_to_keep == max(LENGTHS)
        return current, torch.ones_like(current), None

    monkeypatch.setattr(trainer, "_get_per_token_logps_and_entropies", fixed_logps_and_entropies)
    inputs = fixed_batch(
        old_logps=torch.tensor([sum(x) for x in old], dtype=torch.float32),
        advantages=torch.tensor(adv, dtype=torch.float32),
    )
    mask = inputs["completion_mask"]
    trainer.model.train()
    loss = trainer._compute_loss(trainer.model, inputs)
    want = reference_rloo_loss(logps, old, adv)
    diff = abs(loss.item() - want)
    print(f"rloo loss: TRL {loss.item():.6f} reference {want:.6f} |diff| {diff:.2e}")
    assert diff < 1e-5

    # The gradient: autograd of the same formula in float64.
    loss.backward()
    lp = _padded(logps, torch).double().requires_grad_(True)
    m = mask.double()
    rho = torch.exp((lp * m).sum(1) - torch.tensor([sum(x) for x in old], dtype=torch.float64))
    a = torch.tensor(adv, dtype=torch.float64)
    ref_loss = (-torch.min(rho * a, rho.clamp(1 - EPS, 1 + EPS) * a)).mean()
    ref_loss.backward()
    assert abs(ref_loss.item() - want) < 1e-7
    assert torch.allclose(current.grad.double() * m, lp.grad * m, atol=1e-6)
