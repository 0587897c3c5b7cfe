"""The GRPO loss variants (docs/rl.md) on a fixed batch: each one's loss equals a float64 reference written here from
its paper's formula, on the settings ``grpo_config`` / ``configure_loss_variants`` give the trainer for its option.

The batch: 2 prompts x 4 completions of lengths 1-6, fixed advantages, fixed current and old per-token log-probs
whose ratios fall on both sides of every clipping range. The loss is the ``grpo`` trainer's ``_compute_loss`` (TRL's
code for GSPO, CISPO, SAPO; TRL's ``dapo`` under swiftcore's weights for FIPO); only the model's log-prob call is
replaced (at the class, so the trainer's own hook of that call still runs). Dr. GRPO's and DAPO's token-level losses
with clip-higher are checked the same way in ``test_grpo_math.py``; their options are checked here.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

LENGTHS = [3, 6, 1, 4, 5, 2, 6, 3]
ADVANTAGES = [1.2, -0.7, 0.4, -0.9, 0.8, 0.8, -1.1, -0.5]
NUM_ITEMS = 2.0 * sum(LENGTHS)  # as if this micro-batch were half of the generation batch


def fixed_logps(offset: float) -> list[list[float]]:
    """Deterministic per-token log-probs, different per sequence and token."""
    return [
        [-1.0 - 0.1 * t - 0.05 * i + offset * math.sin(1.7 * i + t) for t in range(n)] for i, n in enumerate(LENGTHS)
    ]


CURRENT, OLD = fixed_logps(0.3), fixed_logps(0.0)


def _padded(rows: list[list[float]], torch: Any) -> Any:
    out = torch.zeros(len(rows), max(LENGTHS), dtype=torch.float32)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row)
    return out


def options(**method: Any) -> Any:
    """``GRPOOptions`` of the fixed batch's shape (groups of 4, completions of up to 6 tokens)."""
    from swiftcore_recipe_rl.options import GRPOOptions

    return GRPOOptions(reward=("column",), num_generations=4, max_completion_length=6, **method)


def trl_args(tmp_path: Path, **method: Any) -> Any:
    """The keyword arguments the recipe gives TRL's ``GRPOConfig`` for ``method`` (as a namespace, with
    ``epsilon_high`` defaulted as GRPOConfig does). Building a real TrainingArguments would reset the accelerator
    state the session's trainer runs on; ``test_a_built_trainer_has_the_variant`` builds a real one."""
    from types import SimpleNamespace

    import swiftcore_train
    from swiftcore_recipe_rl.recipe import grpo_config
    from swiftcore_train import TrainConfig

    def namespace(cfg: Any, output_dir: Any, **kwargs: Any) -> Any:
        return SimpleNamespace(**kwargs)

    cfg = TrainConfig(model="unused", dataset=("unused",), output_dir=str(tmp_path), batch_size=2)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(swiftcore_train, "training_arguments", namespace)
        return grpo_config(cfg, options(**method), tmp_path, reward_names=["column"])


def trainer_loss(trainer: Any, args: Any, monkeypatch: pytest.MonkeyPatch, fixed_batch: Any) -> tuple[Any, Any, Any]:
    """The trainer's loss on the fixed batch (the ``fixed_batch`` fixture's), with the settings of ``args`` (as
    GRPOTrainer.__init__ reads them); ``(loss, the current log-probs tensor (its .grad after backward), completion
    mask)``."""
    import torch
    import trl

    current = _padded(CURRENT, torch).requires_grad_(True)
    inputs = fixed_batch(
        advantages=torch.tensor(ADVANTAGES, dtype=torch.float32),
        old_per_token_logps=_padded(OLD, torch),
        num_items_in_batch=torch.tensor(NUM_ITEMS),
    )
    mask = inputs["completion_mask"]

    def fixed_logps_and_entropies(self: Any, model: Any, input_ids: Any, attention_mask: Any, keep: int, **kw: Any):
        return current, torch.ones_like(current), None

    monkeypatch.setattr(trl.GRPOTrainer, "_get_per_token_logps_and_entropies", fixed_logps_and_entropies)
    settings = {
        "loss_type": args.loss_type,
        "importance_sampling_level": args.importance_sampling_level,
        "epsilon_low": args.epsilon,
        "epsilon_high": args.epsilon_high if args.epsilon_high is not None else args.epsilon,
        "beta": args.beta,
        "current_gradient_accumulation_steps": 1,
    }
    for name, value in settings.items():
        monkeypatch.setattr(trainer, name, value, raising=False)
    for name in ("delta", "sapo_temperature_pos", "sapo_temperature_neg"):
        monkeypatch.setattr(trainer.args, name, getattr(args, name))
    trainer.model.train()
    loss = trainer._compute_loss(trainer.model, inputs)
    assert torch.equal(inputs["advantages"], torch.tensor(ADVANTAGES))  # the batch itself is left as it was
    return loss, current, mask


def ratios() -> list[list[float]]:
    return [[math.exp(a - b) for a, b in zip(lp, lo, strict=True)] for lp, lo in zip(CURRENT, OLD, strict=True)]


def check_gradient(current: Any, mask: Any, want_grad: list[list[float]]) -> None:
    import torch

    got = current.grad.double() * mask
    want = _padded(want_grad, torch).double()
    assert torch.allclose(got, want, atol=1e-6), (got - want).abs().max()


# ------------------------------------------------------------------------------------------------ GSPO


def test_gspo_sequence_ratio_equals_the_reference(
    grpo_trainer: Any, tmp_path: Path, monkeypatch: Any, fixed_batch: Any
) -> None:
    """GSPO (Zheng et al., 2025, arXiv:2507.18071, eq. 5-7): ``s_i = exp(mean_t (log pi - log pi_old))``,
    ``J = 1/G sum_i min(s_i A_i, clip(s_i, 1 - eps, 1 + eps_high) A_i)``; the loss is ``-J``."""
    eps, eps_high = 0.05, 0.08
    args = trl_args(tmp_path, grpo_loss_type="gspo", grpo_epsilon=eps, grpo_epsilon_high=eps_high)
    assert (args.loss_type, args.importance_sampling_level) == ("grpo", "sequence")
    loss, current, mask = trainer_loss(grpo_trainer, args, monkeypatch, fixed_batch)

    seq = [math.exp(sum(a - b for a, b in zip(lp, lo, strict=True)) / len(lp)) for lp, lo in zip(CURRENT, OLD)]
    clipped = [min(max(s, 1 - eps), 1 + eps_high) for s in seq]
    assert min(seq) < 1 - eps and max(seq) > 1 + eps_high  # both sides of the clipping are exercised
    want = -sum(min(s * a, c * a) for s, c, a in zip(seq, clipped, ADVANTAGES, strict=True)) / len(seq)
    print(f"gspo: TRL {loss.item():.8f} reference {want:.8f}")
    assert abs(loss.item() - want) < 1e-6

    # d/d logp_{i,t} of -s_i A_i / G (unclipped side) is -s_i A_i / (G |y_i|); 0 where the clip binds
    loss.backward()
    grad = []
    for s, c, a, lp in zip(seq, clipped, ADVANTAGES, CURRENT, strict=True):
        active = s * a <= c * a  # the unclipped term is the minimum
        grad.append([(-s * a / (len(seq) * len(lp)) if active else 0.0)] * len(lp))
    check_gradient(current, mask, grad)


# ------------------------------------------------------------------------------------------------ CISPO


def test_cispo_equals_the_reference(grpo_trainer: Any, tmp_path: Path, monkeypatch: Any, fixed_batch: Any) -> None:
    """CISPO (MiniMax-M1, arXiv:2506.13585, eq. 4; TRL's convention caps the weight at ``eps_max``):
    ``L = -1/N sum_{i,t} sg(min(r_{i,t}, eps_max)) A_i log pi(y_{i,t})``, ``N`` the generation batch's tokens; the
    gradient flows through ``log pi`` only (the clipped weight is detached, so clipped tokens still learn)."""
    eps_max = 1.3
    args = trl_args(tmp_path, grpo_loss_type="cispo", grpo_epsilon_high=eps_max)
    assert args.loss_type == "cispo"
    loss, current, mask = trainer_loss(grpo_trainer, args, monkeypatch, fixed_batch)

    r = ratios()
    assert max(max(row) for row in r) > eps_max
    weights = [[min(x, eps_max) for x in row] for row in r]
    want = (
        -sum(w * a * lp for row_w, a, row_lp in zip(weights, ADVANTAGES, CURRENT) for w, lp in zip(row_w, row_lp))
        / NUM_ITEMS
    )
    print(f"cispo: TRL {loss.item():.8f} reference {want:.8f}")
    assert abs(loss.item() - want) < 1e-6
    loss.backward()
    check_gradient(current, mask, [[-w * a / NUM_ITEMS for w in row] for row, a in zip(weights, ADVANTAGES)])


# ------------------------------------------------------------------------------------------------ SAPO


def test_sapo_soft_gate_equals_the_reference(
    grpo_trainer: Any, tmp_path: Path, monkeypatch: Any, fixed_batch: Any
) -> None:
    """SAPO (arXiv:2511.20347): the hard clip replaced by ``f(r) = 4 / tau * sigmoid(tau (r - 1))``, ``tau`` of the
    advantage's sign; ``L = -1/G sum_i 1/|y_i| sum_t f(r_{i,t}) A_i``."""
    tau_pos, tau_neg = 1.0, 1.7
    args = trl_args(tmp_path, grpo_loss_type="sapo", sapo_temperature_pos=tau_pos, sapo_temperature_neg=tau_neg)
    loss, _, _ = trainer_loss(grpo_trainer, args, monkeypatch, fixed_batch)

    def gate(r: float, tau: float) -> float:
        return 4.0 / tau / (1.0 + math.exp(-tau * (r - 1.0)))

    per_seq = []
    for row, a in zip(ratios(), ADVANTAGES, strict=True):
        tau = tau_pos if a > 0 else tau_neg
        per_seq.append(sum(-gate(r, tau) * a for r in row) / len(row))
    want = sum(per_seq) / len(per_seq)
    print(f"sapo: TRL {loss.item():.8f} reference {want:.8f}")
    assert abs(loss.item() - want) < 1e-6


# ------------------------------------------------------------------------------------------------ FIPO


def reference_fipo_weights(
    decay_rate: float, clip_range: float, high_only: bool, safety: float, filter_ratio: float | None
) -> list[list[float]]:
    """FIPO's influence weights, by the double sum of the paper (no recursion)."""
    gamma = 2.0 ** (-1.0 / decay_rate)
    out = []
    for lp, lo, a in zip(CURRENT, OLD, ADVANTAGES, strict=True):
        d = [x - y for x, y in zip(lp, lo, strict=True)]
        kept = [v if filter_ratio is None or v <= math.log(filter_ratio) else 0.0 for v in d]
        row = []
        for t in range(len(d)):
            future = sum(gamma ** (k - t) * kept[k] for k in range(t, len(d)))
            f = min(max(math.exp(future), 1.0 if high_only else 1.0 - clip_range), 1.0 + clip_range)
            if safety > 0 and a < 0 and math.exp(d[t]) > safety:
                f = min(max(f, 0.8), 1.0)
            row.append(f)
        out.append(row)
    return out


@pytest.mark.parametrize(
    ("method", "filter_ratio"),
    [
        ({"fipo_decay_rate": 2.0}, None),
        ({"fipo_decay_rate": 4.0, "fipo_clip_high_only": False, "fipo_clip_range": 0.3}, None),
        ({"fipo_decay_rate": 3.0, "fipo_clip_high_only": False, "fipo_safety_threshold": 1.2}, 1.5),
    ],
)
def test_fipo_equals_the_reference(
    grpo_trainer: Any, tmp_path: Path, monkeypatch: Any, fixed_batch: Any, method: dict, filter_ratio: float | None
) -> None:
    """FIPO (arXiv:2603.19835): DAPO's token-level clipped loss with each token's advantage times its influence
    weight ``f_t = clip(exp(sum_{k>=t} gamma^(k-t) d_k))`` (see :func:`swiftcore_recipe_rl.losses.fipo_weights`)."""
    from swiftcore_recipe_rl.trainer import configure_loss_variants

    eps, eps_high = 0.2, 0.28
    args = trl_args(tmp_path, grpo_loss_type="fipo", grpo_epsilon_high=eps_high, grpo_delta=filter_ratio, **method)
    assert args.loss_type == "dapo"
    monkeypatch.setattr(grpo_trainer, "fipo", None)  # restored after the test
    configure_loss_variants(grpo_trainer, options(grpo_loss_type="fipo", **method))
    assert grpo_trainer.fipo is not None
    loss, current, mask = trainer_loss(grpo_trainer, args, monkeypatch, fixed_batch)

    opts = options(grpo_loss_type="fipo", **method)
    weights = reference_fipo_weights(
        opts.fipo_decay_rate, opts.fipo_clip_range, opts.fipo_clip_high_only, opts.fipo_safety_threshold, filter_ratio
    )
    assert any(w != 1.0 for row in weights for w in row)  # the weighting is exercised
    total, grad = 0.0, []
    for row_r, row_w, a in zip(ratios(), weights, ADVANTAGES, strict=True):
        grow = []
        for r, w in zip(row_r, row_w, strict=True):
            aw = a * w
            clipped = min(max(r, 1 - eps), 1 + eps_high)
            total += -min(r * aw, clipped * aw)
            grow.append(-r * aw / NUM_ITEMS if r * aw <= clipped * aw else 0.0)  # d/dlogp of the active term
        grad.append(grow)
    want = total / NUM_ITEMS
    print(f"fipo {method} filter={filter_ratio}: swiftcore+TRL {loss.item():.8f} reference {want:.8f}")
    assert abs(loss.item() - want) < 1e-6
    loss.backward()
    check_gradient(current, mask, grad)


def test_fipo_is_dapo_on_fresh_rollouts() -> None:
    """On the first pass (old log-probs = current) every weight is 1: FIPO adds nothing until the policy moves."""
    import torch
    from swiftcore_recipe_rl.losses import fipo_weights

    mask = torch.ones(2, 5)
    w = fipo_weights(torch.zeros(2, 5), mask, torch.tensor([1.0, -1.0]), decay_rate=2.0, clip_range=0.2)
    assert torch.equal(w, mask)


# ------------------------------------------------------------------------------------------------ DAPO


def test_dynamic_sampling_drops_groups_of_equal_rewards(grpo_trainer: Any, monkeypatch: Any) -> None:
    """DAPO's dynamic sampling (arXiv:2503.14476, eq. 11), filter form: a group whose rewards are all equal leaves
    the loss (its completion mask is 0) and the dapo normaliser counts the other groups' tokens only."""
    import torch

    trainer = grpo_trainer
    monkeypatch.setattr(trainer, "dynamic_sampling", True)
    completion_ids = [[100 + t for t in range(n)] for n in LENGTHS]

    def fixed_rollouts(prompts: list) -> tuple:
        return [[1, 29, 30]] * len(prompts), completion_ids, None, ["c"] * len(prompts), None, {}, None, []

    monkeypatch.setattr(trainer, "_generate", fixed_rollouts)
    trainer.model.train()
    rewards = [1.0, 0.0, 0.5, 0.0, 2.0, 2.0, 2.0, 2.0]  # the second group carries no signal
    out = trainer._generate_and_score_completions([{"prompt": "p", "r": r} for r in rewards])
    keep = [any(x != y for x in rewards[g : g + 4] for y in rewards[g : g + 4]) for g in (0, 0, 0, 0, 4, 4, 4, 4)]
    want_lengths = [n if k else 0 for n, k in zip(LENGTHS, keep, strict=True)]
    assert out["completion_mask"].sum(1).tolist() == want_lengths
    assert out["num_items_in_batch"].item() == sum(want_lengths)
    assert trainer._metrics["train"]["dynamic_sampling/kept"][-1] == 0.5

    monkeypatch.setattr(trainer, "dynamic_sampling", False)  # off: every group stays
    out = trainer._generate_and_score_completions([{"prompt": "p", "r": r} for r in rewards])
    assert torch.equal(out["completion_mask"].sum(1), torch.tensor(LENGTHS))


def test_informative_groups_ignores_unscorable_rows() -> None:
    import torch
    from swiftcore_recipe_rl.losses import informative_groups

    rewards = torch.tensor([1.0, float("nan"), 1.0, 1.0, 0.0, 1.0, float("nan"), 0.0])
    assert informative_groups(rewards, 4).tolist() == [False] * 4 + [True] * 4


@pytest.mark.parametrize(("buffer", "penalty"), [(2, 1.0), (3, 0.5)])
def test_overlong_penalty_equals_the_reference(tmp_path: Path, buffer: int, penalty: float) -> None:
    """DAPO's soft overlong punishment (arXiv:2503.14476, eq. 13), TRL's, scaled by ``--overlong-penalty`` and
    added as one more reward function of weight 1."""
    from swiftcore_recipe_rl.shaping import extra_rewards

    opts = options(overlong_buffer=buffer, overlong_penalty=penalty)
    (func,) = extra_rewards(opts)
    limit = opts.max_completion_length
    lengths = list(range(1, limit + 3))
    got = func(completion_ids=[[7] * n for n in lengths], prompts=["p"] * len(lengths))

    def reference(n: int) -> float:
        if n <= limit - buffer:
            return 0.0
        return penalty * ((limit - buffer) - n) / buffer if n <= limit else -penalty

    assert got == pytest.approx([reference(n) for n in lengths], abs=1e-12)
    assert got[-1] == -penalty and min(got) == -penalty
    assert trl_args(tmp_path, overlong_buffer=buffer).reward_weights == [1.0, 1.0]
    assert trl_args(tmp_path).reward_weights == [1.0] and extra_rewards(options()) == []


# ------------------------------------------------------------------------------------------------ options


@pytest.mark.parametrize(
    ("method", "expected"),
    [
        ({"grpo_loss_type": "dr_grpo", "scale_rewards": "none"}, {"loss_type": "dr_grpo", "scale_rewards": "none"}),
        ({"grpo_loss_type": "dapo", "grpo_epsilon_high": 0.28, "mask_truncated_completions": True},
         {"loss_type": "dapo", "epsilon_high": 0.28, "mask_truncated_completions": True}),
        ({"grpo_loss_type": "gspo"}, {"loss_type": "grpo", "importance_sampling_level": "sequence"}),
        ({"grpo_loss_type": "cispo", "grpo_epsilon_high": 5.0}, {"loss_type": "cispo", "epsilon_high": 5.0}),
        ({"grpo_loss_type": "sapo", "sapo_temperature_neg": 2.0}, {"loss_type": "sapo", "sapo_temperature_neg": 2.0}),
        ({"grpo_loss_type": "fipo", "grpo_delta": 10.0}, {"loss_type": "dapo", "delta": 10.0}),
    ],
)  # fmt: skip
def test_each_option_reaches_trls_config(tmp_path: Path, method: dict, expected: dict) -> None:
    args = trl_args(tmp_path, **method)
    for name, value in expected.items():
        assert getattr(args, name) == value, name
    if "importance_sampling_level" not in expected:
        assert args.importance_sampling_level == "token"


def test_a_built_trainer_has_the_variant(tiny_dir: Path, plugins: Any, tmp_path: Path, trainer_factory: Any) -> None:
    """The trainer TRL builds from the recipe's real ``GRPOConfig`` reads the variant's settings."""
    trainer = trainer_factory("grpo", tiny_dir, plugins, tmp_path, grpo_loss_type="gspo", grpo_epsilon=3e-4,
                              grpo_epsilon_high=4e-4, grpo_delta=10.0)  # fmt: skip
    assert (trainer.loss_type, trainer.importance_sampling_level) == ("grpo", "sequence")
    assert (trainer.epsilon_low, trainer.epsilon_high, trainer.args.delta) == (3e-4, 4e-4, 10.0)


@pytest.mark.parametrize(
    ("method", "message"),
    [
        ({"grpo_loss_type": "cispo"}, "--grpo-loss-type cispo"),
        ({"grpo_loss_type": "cispo", "grpo_epsilon_high": 0.28}, "--grpo-epsilon-high"),
        ({"grpo_loss_type": "nope"}, "--grpo-loss-type"),
        ({"fipo_decay_rate": 8.0}, "--fipo-decay-rate: only read by --grpo-loss-type fipo"),
        ({"sapo_temperature_pos": 2.0}, "--sapo-temperature-pos: only read by --grpo-loss-type sapo"),
        ({"grpo_loss_type": "fipo", "fipo_clip_range": 1.5}, "--fipo-clip-range"),
        ({"grpo_delta": 0.9}, "--grpo-delta"),
        ({"overlong_buffer": 6}, "--overlong-buffer"),
        ({"overlong_buffer": 2, "overlong_penalty": -1.0}, "--overlong-penalty"),
    ],
)
def test_bad_variant_options_are_refused_naming_the_flag(method: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        options(**method)


def test_the_overlong_penalty_pickles_and_scores_the_same_after() -> None:
    """The async rollout worker and Ray pickle reward functions: the penalty must survive a round trip."""
    import pickle

    from swiftcore_recipe_rl.shaping import OverlongPenalty

    penalty = OverlongPenalty(max_completion_length=8, buffer=4, penalty=0.5)
    ids = [[1] * 3, [1] * 6, [1] * 9]
    assert pickle.loads(pickle.dumps(penalty))(ids) == penalty(ids) == [0.0, -0.25, -0.5]
