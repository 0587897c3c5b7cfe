"""The losses reward what they should: aligned pairs, positives first, the right class."""

from __future__ import annotations

import torch
from swiftcore_heads import losses
from torch.nn import functional as F


def test_infonce_prefers_aligned_positives():
    torch.manual_seed(0)
    q = torch.randn(4, 8)
    docs_good = torch.stack([q[i // 2] if i % 2 == 0 else torch.randn(8) for i in range(8)])
    docs_bad = torch.randn(8, 8)
    good = losses.infonce(q, docs_good, group_size=2, temperature=0.05)
    bad = losses.infonce(q, docs_bad, group_size=2, temperature=0.05)
    assert good < bad
    assert losses.infonce(q, docs_good, group_size=2, temperature=0.05, in_batch=False) < good + 1e-6


def test_infonce_matches_hand_computed_cross_entropy():
    q = F.normalize(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), dim=-1)
    d = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    logits = q @ d.T / 0.5
    assert torch.isclose(losses.infonce(q, d, group_size=1, temperature=0.5), F.cross_entropy(logits, torch.arange(2)))


def test_matryoshka_is_the_weighted_sum_over_prefixes():
    torch.manual_seed(1)
    q, d = torch.randn(3, 8), torch.randn(3, 8)

    def fn(a, b):
        return losses.infonce(a, b, group_size=1)

    total = losses.matryoshka(fn, [2, 8], [0.5, 2.0], q, d)
    assert torch.isclose(total, 0.5 * fn(q[:, :2], d[:, :2]) + 2.0 * fn(q, d))


def test_listwise_and_pointwise_prefer_the_positive_first():
    right = torch.tensor([3.0, -1.0, -2.0, 2.0, 0.0, -1.0])
    wrong = torch.tensor([-3.0, 1.0, 2.0, -2.0, 0.0, 1.0])
    assert losses.listwise_loss(right, 3) < losses.listwise_loss(wrong, 3)
    targets = torch.tensor([1.0, 0, 0, 1, 0, 0])
    assert losses.pointwise_loss(right, targets) < losses.pointwise_loss(wrong, targets)


def test_classification_losses_by_problem_type():
    logits = torch.tensor([[2.0, -1.0], [-1.0, 2.0]])
    assert losses.classification_loss(logits, torch.tensor([0, 1]), "single_label_classification") < 0.1
    targets = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    multi = losses.classification_loss(logits, targets, "multi_label_classification")
    p = torch.sigmoid(logits)
    by_hand = -(targets * p.log() + (1 - targets) * (1 - p).log()).mean()
    assert torch.isclose(multi, by_hand)
    reg = losses.classification_loss(torch.tensor([[0.5], [1.5]]), torch.tensor([0.5, 1.0]), "regression")
    assert torch.isclose(reg, torch.tensor(0.125))
    assert losses.cosine_similarity_loss(torch.eye(2), torch.eye(2), torch.ones(2)) < 1e-6
    assert losses.contrastive_loss(torch.eye(2), -torch.eye(2), torch.zeros(2)) < 1e-6
