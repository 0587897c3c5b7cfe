"""Training-inference mismatch (docs/rl.md, "Training-inference mismatch"): the importance-sampling corrections of
engine rollouts (TIS, MIS; TRL's code, fed the engine's sampling log-probs), the logged ``rollout_kl`` and
``--fp32-lm-head``.

- Fixed batch: 2 prompts x 4 completions with fixed rewards, fixed trainer log-probs at rollout time (``old``), fixed
  current log-probs and fixed engine log-probs, so that the engine/trainer ratios fall on both sides of the cap C.
  The ``grpo`` trainer's loss, its gradient and the logged ``rollout_kl`` equal a float64 reference written here
  from the formulas, for each of TRL's four modes (``token_truncate`` is TIS, ``token_mask`` MIS).
- Perturbed engine: a real colocated transformers engine on a copy of the checkpoint whose weights are off by
  noise (the LoRA adapter synced as in a run; the base stays perturbed, as a bf16 or quantised engine's would),
  against one on the same checkpoint. With the perturbed one, ``rollout_kl`` > 0, some tokens' ratios exceed the
  cap and the policy gradient equals the reference with those tokens clipped (TIS) or dropped (MIS), and differs
  from the uncorrected gradient; with the same weights ``rollout_kl`` ~ 0 and the correction leaves the gradient
  as it was.
- End to end: ``swiftcore train --recipe grpo`` on the vowel task with a transformers engine, MIS and
  ``--fp32-lm-head`` in bfloat16 learns, and logs ``rollout_kl`` every step.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest

REWARDS = [1.0, 0.0, 0.5, 0.0, 2.0, 2.0, 1.0, -1.0]
GROUP = 4
LENGTHS = [3, 6, 1, 4, 5, 2, 6, 3]
EPS = 0.2  # the trainer's --grpo-epsilon (default; epsilon_high defaults to it)
CAP = 1.2
MODES = ["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]


def _logps(offset: float, phase: float = 1.7) -> list[list[float]]:
    """Deterministic per-token log-probs, different per sequence and token."""
    return [
        [-1.0 - 0.1 * t - 0.05 * i + offset * math.sin(phase * i + t) for t in range(n)] for i, n in enumerate(LENGTHS)
    ]


OLD = _logps(0.0)  # the trainer's log-probs of the rollouts (TRL's old_per_token_logps)
CURRENT = _logps(0.3)  # the policy's in the loss (PPO ratios on both sides of the clip)
SAMPLED = [[o - 0.35 * math.cos(2.3 * i + 1.1 * t) for t, o in enumerate(row)] for i, row in enumerate(OLD)]


# ------------------------------------------------------------------------------------------------ the reference


def reference_weights(old: list[list[float]], sampled: list[list[float]], mode: str, cap: float) -> list[list[float]]:
    """The importance weight of each token: ``r = pi_old / mu`` per token (``token_*``) or per sequence (``r_i =
    prod_t r_{i,t}``, ``sequence_*``); TIS/truncate ``min(r, C)``; MIS/mask ``r`` where ``r <= C``, else 0."""
    out = []
    for lo, ls in zip(old, sampled, strict=True):
        token = [math.exp(a - b) for a, b in zip(lo, ls, strict=True)]
        ratios = [math.prod(token)] * len(lo) if mode.startswith("sequence") else token
        if mode.endswith("truncate"):
            out.append([min(r, cap) for r in ratios])
        else:
            out.append([r if r <= cap else 0.0 for r in ratios])
    return out


def reference_advantages(rewards: list[float]) -> list[float]:
    """``(R_i - mean(R)) / (std(R) + 1e-4)`` over each group, std Bessel-corrected (``--scale-rewards group``)."""
    out = []
    for start in range(0, len(rewards), GROUP):
        g = rewards[start : start + GROUP]
        mean = sum(g) / len(g)
        std = math.sqrt(sum((r - mean) ** 2 for r in g) / (len(g) - 1))
        out += [(r - mean) / (std + 1e-4) for r in g]
    return out


def reference_loss(current: list[list[float]], weights: list[list[float]], adv: list[float]) -> float:
    """DAPO's token-level loss with the correction: ``sum_{i,t} w_{i,t} * -min(rho A_i, clip(rho) A_i) / N``,
    ``rho = exp(current - old)``, ``N`` the batch's completion tokens."""
    total = 0.0
    for i, (lp, lo, w) in enumerate(zip(current, OLD, weights, strict=True)):
        for a, b, wt in zip(lp, lo, w, strict=True):
            rho = math.exp(a - b)
            total += wt * -min(rho * adv[i], min(max(rho, 1 - EPS), 1 + EPS) * adv[i])
    return total / sum(LENGTHS)


def reference_kl(old: list[list[float]], sampled: list[list[float]]) -> float:
    """``KL(mu || pi)`` by the k3 estimator, the token mean of ``r - 1 - log r``, ``r = pi / mu``."""
    terms = [math.exp(a - b) - 1 - (a - b) for lo, ls in zip(old, sampled) for a, b in zip(lo, ls)]
    return sum(terms) / len(terms)


def _padded(rows: list[list[float]], torch: Any) -> Any:
    out = torch.zeros(len(rows), max(LENGTHS), dtype=torch.float32)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row)
    return out


# ------------------------------------------------------------------------------------------------ options


def _grpo_config_kwargs(tmp_path: Path, **method: Any) -> dict[str, Any]:
    """The keyword arguments the recipe gives TRL's ``GRPOConfig`` (a real one is built by the trainer tests)."""
    import swiftcore_train
    from swiftcore_recipe_rl.options import GRPOOptions
    from swiftcore_recipe_rl.recipe import grpo_config
    from swiftcore_train import TrainConfig

    cfg = TrainConfig(model="unused", dataset=("unused",), output_dir=str(tmp_path), batch_size=2)
    options = GRPOOptions(reward=("format",), num_generations=4, **method)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(swiftcore_train, "training_arguments", lambda cfg, output_dir, **kwargs: kwargs)
        return grpo_config(cfg, options, tmp_path, reward_names=["format"])


def test_the_options_reach_trls_config(tmp_path: Path) -> None:
    on = _grpo_config_kwargs(
        tmp_path, rollout_engine="transformers", rollout_importance_sampling="token_mask", rollout_is_clip_max=1.5,
        fp32_lm_head=True,
    )  # fmt: skip
    assert on["cast_lm_head_to_fp32"] is True
    assert on["vllm_importance_sampling_correction"] is True
    assert (on["vllm_importance_sampling_mode"], on["vllm_importance_sampling_clip_max"]) == ("token_mask", 1.5)
    off = _grpo_config_kwargs(tmp_path, rollout_engine="transformers")
    assert off["cast_lm_head_to_fp32"] is False and "vllm_importance_sampling_correction" not in off


# ------------------------------------------------------------------------------------------------ fixed batch


@pytest.mark.parametrize("mode", MODES)
def test_corrected_loss_and_rollout_kl_equal_the_reference(
    grpo_trainer: Any, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    trainer = grpo_trainer
    weights = reference_weights(OLD, SAMPLED, mode, CAP)
    flat = [r for row in reference_weights(OLD, SAMPLED, mode, math.inf) for r in row]
    assert min(flat) < 1 < CAP < max(flat)  # the fixed batch has ratios on both sides of the cap
    current = _padded(CURRENT, torch).requires_grad_(True)
    completion_ids = [[100 + t for t in range(n)] for n in LENGTHS]

    def fixed_rollouts(prompts: list) -> tuple:  # the engine's rollouts and its sampling log-probs
        return [[1, 29, 30]] * len(prompts), completion_ids, None, ["c"] * len(prompts), SAMPLED, {}, None, []

    def fixed_logps(model: Any, input_ids: Any, attention_mask: Any, logits_to_keep: int, **kw: Any) -> tuple:
        # no grad: TRL's recomputation of the rollouts' log-probs (old); with grad: the loss's (current)
        logps = current if torch.is_grad_enabled() else _padded(OLD, torch)
        return logps, torch.ones_like(logps), None

    values = {
        "_generate": fixed_rollouts,
        "_get_per_token_logps_and_entropies": fixed_logps,
        "importance_sampling": True,
        "vllm_importance_sampling_correction": True,
        "vllm_importance_sampling_mode": mode,
        "vllm_importance_sampling_clip_max": CAP,
        "vllm_importance_sampling_clip_min": None,
        "loss_type": "dapo",
        "current_gradient_accumulation_steps": 1,
    }
    for name, value in values.items():
        monkeypatch.setattr(trainer, name, value, raising=False)
    trainer.model.train()
    out = trainer._generate_and_score_completions([{"prompt": "p", "r": r} for r in REWARDS])
    kl = trainer._metrics["train"]["rollout_kl"][-1]
    loss = trainer._compute_loss(trainer.model, out)
    loss.backward()

    adv = reference_advantages(REWARDS)
    want = reference_loss(CURRENT, weights, adv)
    print(f"{mode}: loss {loss.item():.7f} reference {want:.7f}; rollout_kl {kl:.6f} reference "
          f"{reference_kl(OLD, SAMPLED):.6f}")  # fmt: skip
    assert abs(loss.item() - want) < 1e-6
    assert abs(kl - reference_kl(OLD, SAMPLED)) < 1e-6

    # The gradient: autograd of the same formula on the same log-probs in float64.
    m = out["completion_mask"].double()
    lp = _padded(CURRENT, torch).double().requires_grad_(True)
    rho = torch.exp(lp - _padded(OLD, torch).double())
    a = torch.tensor(adv, dtype=torch.float64)[:, None]
    per_token = -torch.min(rho * a, rho.clamp(1 - EPS, 1 + EPS) * a) * _padded(weights, torch).double()
    ((per_token * m).sum() / sum(LENGTHS)).backward()
    assert torch.allclose(current.grad.double() * m, lp.grad * m, atol=1e-6), (current.grad.double() - lp.grad).abs()
    zeroed = (_padded(weights, torch) == 0) & m.bool()
    if mode.endswith("mask"):  # MIS: the tokens above the cap get no gradient at all
        assert zeroed.any() and torch.all(current.grad[zeroed] == 0)
    else:
        assert not zeroed.any()


# ------------------------------------------------------------------------------------------------ perturbed engine


@pytest.fixture(scope="module")
def perturbed_dir(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the tiny checkpoint whose every weight matrix is off by Gaussian noise (0.3 of its own std)."""
    import torch
    from safetensors.torch import load_file, save_file

    out = tmp_path_factory.mktemp("perturbed") / "qwen3_5"
    shutil.copytree(tiny_dir, out)
    generator = torch.Generator().manual_seed(7)
    tensors = load_file(str(out / "model.safetensors"))
    for name, value in tensors.items():
        if value.is_floating_point() and value.dim() >= 2:
            noise = torch.randn(value.shape, generator=generator, dtype=torch.float32) * value.float().std() * 0.3
            tensors[name] = (value.float() + noise).to(value.dtype)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def _grad(model: Any) -> Any:
    import torch

    return torch.cat([p.grad.flatten() for _, p in sorted(model.named_parameters()) if p.grad is not None])


def _reference_grad(trainer: Any, out: dict[str, Any], mode: str | None) -> tuple[Any, Any]:
    """The gradient of the grpo loss with the correction ``mode`` (None: uncorrected) written here: a fresh forward
    pass for the policy's log-probs, the weights from them and the engine's sampling log-probs in float64; and the
    per-token ratio ``pi / mu`` it used."""
    import torch

    model = trainer.model
    model.zero_grad()
    prompt, completion = out["prompt_ids"], out["completion_ids"]
    logits = model(
        input_ids=torch.cat([prompt, completion], 1),
        attention_mask=torch.cat([out["prompt_mask"], out["completion_mask"]], 1),
    ).logits[:, prompt.size(1) - 1 : -1]
    logp = torch.log_softmax(logits.double() / trainer.args.temperature, -1).gather(-1, completion[..., None])[..., 0]
    m = out["completion_mask"].double()
    assert torch.allclose(logp.detach() * m, out["old_per_token_logps"].double() * m, atol=1e-5)
    log_ratio = (logp.detach() - out["sampling_per_token_logps"].double()) * m
    ratio = log_ratio.exp()
    if mode is None:
        w = torch.ones_like(ratio)
    elif mode == "token_truncate":
        w = ratio.clamp(max=CAP)
    else:  # token_mask
        w = ratio * (ratio <= CAP)
    rho = torch.exp(logp - logp.detach())  # on-policy for the trainer: 1, with the gradient of log pi
    per_token = -rho * out["advantages"].double()[:, None] * w
    loss = ((per_token * m).sum(-1) / m.sum(-1).clamp(min=1)).mean()  # grpo: the mean of the token means
    loss.backward()
    return _grad(model), ratio


@pytest.mark.slow
def test_a_perturbed_engine_shows_a_mismatch_and_the_correction_reweighs_the_gradient(
    tiny_dir: Path, perturbed_dir: Path, plugins: Any, tmp_path: Path, trainer_factory: Any
) -> None:
    import torch
    from swiftcore_recipe_rl.sync import WeightSync, create_rollout_engine
    from swiftcore_train import TrainConfig

    trainer = trainer_factory(
        "grpo", tiny_dir, plugins, tmp_path / "out", rollout_engine="transformers", grpo_loss_type="grpo",
        rollout_importance_sampling="token_mask", rollout_is_clip_max=CAP,
    )  # fmt: skip
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    torch.manual_seed(0)
    with torch.no_grad():  # a policy a few steps in (LoRA B starts at 0: no gradient reaches A, no effect of it)
        for name, param in trainer.model.named_parameters():
            if "lora_B" in name:
                param.add_(torch.randn_like(param) * 0.02)
    inputs = [{"prompt": "p", "r": r} for r in REWARDS]
    seen: dict[str, dict[str, Any]] = {}
    for label, checkpoint in (("perturbed", perturbed_dir), ("same", tiny_dir)):
        cfg = TrainConfig(model=str(checkpoint), dataset=("unused",), output_dir=str(tmp_path / "out"))
        engine = create_rollout_engine("transformers", cfg, plugins, template=None, device="cpu")
        trainer.rollout_engine, trainer.importance_sampling = engine, True
        trainer.weight_sync, trainer._synced_step = WeightSync(engine), None
        trainer.weight_sync.attach(trainer.model)
        for mode in ("token_truncate", "token_mask"):
            trainer.vllm_importance_sampling_mode = mode
            out = trainer._generate_and_score_completions(inputs)
            kl = trainer._metrics["train"]["rollout_kl"][-1]
            trainer.model.zero_grad()
            trainer._compute_loss(trainer.model, out).backward()
            got = _grad(trainer.model)
            want, ratio = _reference_grad(trainer, out, mode)
            plain, _ = _reference_grad(trainer, out, None)
            m = out["completion_mask"].bool()
            above = int(((ratio > CAP) & m).sum())
            change = float((got - plain).norm() / plain.norm())
            error = float((got - want.to(got.dtype)).norm() / want.norm())
            print(f"{label} engine, {mode}: rollout_kl {kl:.5f}, tokens above the cap {above}/{int(m.sum())}, "
                  f"|g - g_ref|/|g_ref| {error:.2e}, |g - g_uncorrected|/|g_uncorrected| {change:.3f}")  # fmt: skip
            assert error < 1e-4
            seen.setdefault(label, {})[mode] = {"kl": kl, "above": above, "change": change}
        engine.close()

    for mode in ("token_truncate", "token_mask"):
        off, same = seen["perturbed"][mode], seen["same"][mode]
        assert off["kl"] > 1e-2 and same["kl"] < 1e-6, seen
        assert off["above"] > 0 and same["above"] == 0, seen  # tokens the formula clips (TIS) or drops (MIS)
        assert off["change"] > 0.01 and same["change"] < 1e-4, seen


# ------------------------------------------------------------------------------------------------ fp32 LM head


def test_fp32_lm_head_computes_the_policys_log_probs_in_float32(tiny_dir: Path, plugins: Any, tmp_path: Path) -> None:
    """A bfloat16 policy with ``--fp32-lm-head``: the head's weight is float32 while the backbone stays bfloat16, and
    the trainer's per-token log-probs equal the bfloat16 hidden states projected in float64 (to float32 rounding),
    not the bfloat16 projection (off by ~1e-2)."""
    import torch
    from datasets import Dataset
    from swiftcore_recipe_rl.options import GRPOOptions
    from swiftcore_recipe_rl.recipe import grpo_config
    from swiftcore_recipe_rl.trainer import trainer_class
    from swiftcore_train import TrainConfig, apply_tuner

    from swiftcore.api.models import load_model, load_tokenizer, resolve_model_spec

    spec = resolve_model_spec(str(tiny_dir), plugins)
    tokenizer = load_tokenizer(str(tiny_dir))
    cfg = TrainConfig(model=str(tiny_dir), dataset=("unused",), output_dir=str(tmp_path), dtype="bfloat16")
    options = GRPOOptions(reward=("format",), num_generations=2, max_completion_length=4, fp32_lm_head=True)
    model = apply_tuner(load_model(spec, str(tiny_dir), plugins, torch_dtype="bfloat16"), spec, cfg)
    trainer = trainer_class("grpo")(
        model=model, reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
        args=grpo_config(cfg, options, tmp_path, reward_names=["format"]),
        train_dataset=Dataset.from_list([{"prompt": "p"}] * 4), processing_class=tokenizer,
    )  # fmt: skip
    base = trainer.model.get_base_model()
    head = base.get_output_embeddings().weight
    assert head.dtype == torch.float32
    assert base.get_input_embeddings().weight.dtype == torch.bfloat16

    torch.manual_seed(0)
    ids = torch.randint(10, 200, (2, 9))
    keep = 5
    with torch.no_grad():
        got, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, torch.ones_like(ids), keep)
        with trainer.accelerator.autocast():  # the backbone runs under the run's autocast, as TRL runs it
            hidden = base.model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state
        hidden = hidden[:, -keep - 1 : -1]
    assert hidden.dtype == torch.bfloat16
    target = ids[:, -keep:, None]
    temperature = trainer.args.temperature
    fp64 = torch.log_softmax(hidden.double() @ head.double().T / temperature, -1).gather(-1, target)[..., 0]
    bf16 = torch.log_softmax((hidden @ head.bfloat16().T).double() / temperature, -1).gather(-1, target)[..., 0]
    error, bf16_error = (got.double() - fp64).abs().max().item(), (bf16 - fp64).abs().max().item()
    print(f"fp32 head: max |logp - float64 head| {error:.2e}; a bfloat16 head's {bf16_error:.2e}")
    assert error < 1e-4 and bf16_error > 10 * error


# ------------------------------------------------------------------------------------------------ end to end


@pytest.mark.slow
def test_swiftcore_train_with_mis_and_an_fp32_head_learns_and_logs_rollout_kl(
    tiny_dir: Path, tmp_path: Path, one_thread: None
) -> None:
    from swiftcore_testing import run_cli

    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Write a word, number {i}."}) + "\n" for i in range(16)))
    out = tmp_path / "out"
    steps = 20
    # Learning rate 3e-3: at 2e-2 the run is chaotic, not corrected away. On an AVX2-only AMD EPYC, seed 0 stayed
    # at 0.23 -> 0.35 and seed 1 swung between 0.06 and 1.0, with rollout_kl spikes to 4e-2 as the policy sharpened;
    # MIS dropped no token there (ratios <= 1.93 < 2). At 3e-3, seeds 0-4: gains 0.58-0.77 (seed 0: 0.29 -> 0.88),
    # rollout_kl <= 8e-5, no token above the cap. A cap that drops every token (C = 0.5) does not learn (-0.04).
    run_cli(
        "train", "--recipe", "grpo", "--model", str(tiny_dir), "--dataset", str(data), "--output-dir", str(out),
        "--tuner", "lora", "--learning-rate", "3e-3", "--lr-scheduler", "constant", "--max-steps", str(steps),
        "--batch-size", "2", "--logging-steps", "1", "--save-steps", "10000", "--seed", "0", "--dtype", "bfloat16",
        "--reward", "format", "--reward-option", r"format.pattern=^\s*[aeiouAEIOU]", "--num-generations", "8",
        "--max-completion-length", "4", "--grpo-loss-type", "grpo", "--rollout-engine", "transformers",
        "--rollout-importance-sampling", "token_mask", "--rollout-is-clip-max", "2", "--fp32-lm-head",
    )  # fmt: skip
    logs = [json.loads(line) for line in (out / "logs.jsonl").read_text().splitlines()]
    logs = [row for row in logs if "rewards/format/mean" in row]
    rewards = [row["rewards/format/mean"] for row in logs]
    kls = [row["rollout_kl"] for row in logs]
    before, after = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    print(f"grpo + MIS + fp32 head (bf16): reward {before:.3f} -> {after:.3f} in {steps} steps; rollout_kl {kls}")
    assert len(rewards) == steps and all(math.isfinite(k) and k >= 0 for k in kls)
    assert after - before >= 0.4, rewards
    assert json.loads((out / "args.json").read_text())["grpo"]["fp32_lm_head"] is True
