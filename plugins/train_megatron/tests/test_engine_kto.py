"""``swiftcore train --engine megatron --recipe kto`` (the ``kto.megatron`` recipe) against the ``kto`` recipe on the
transformers engine (TRL's KTOTrainer), on gloo with real torchrun processes.

- Loss parity: the first 3 step losses, TRL's logged metrics (``kl``, ``rewards/*``, ``logps/*``) and gradient norms
  at TP1 and TP2 equal the transformers engine's on the same init, row order, ``--ref-model`` and optimiser, full
  weights, fp32, to 1e-5 (the KL estimate is positive at every step; steps 2 and 3 test the gradients).
- The loss is TRL's: ``kto_loss`` runs ``KTOTrainer._compute_loss`` on given log-probs; on a fixed batch it equals
  the KTO paper's eq. 7-8 with TRL's ``z_ref`` (mean mismatched log-ratio, clamped at 0).
- Learning signal: LoRA KTO on the vowel task lifts held-out pairwise accuracy from about 50% to >= 90% (exported
  adapter, plain peft), and the run's held-out reward margin is positive.
- Refusals, before any process group exists: --ep, cutting --truncation, a batch of 1, MoE families, --ref-model
  with LoRA.

The runs the selected tests need are made in as few processes as they allow (conftest's ``CliRuns``, each through
the CLI's own ``main``): both engines' runs on one rank in one process, the TP2 run in one torchrun world of 2 ranks;
a process start costs more than the few steps of the tiny model.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

# make test (CI) leaves this module to make test-all: megatron KTO parity; megatron DPO parity (the shared preference
# path) stays in make test (test_engine_dpo.py) (docs/testing.md, "Two tiers").
pytestmark = pytest.mark.extended

STARTS_RANKS = True  # torchrun worlds (the repository conftest's rank lock)
STEPS = 3
LEARN_STEPS = 24

ROWS = [
    {"prompt": "say apple", "completion": "apple apple", "label": True},
    {"prompt": "name a colour", "completion": "a loud noise, very loud", "label": False},
    {"prompt": "count to three", "chosen": "one two three", "rejected": "three"},  # a pair: one of each
    {"prompt": "greet me", "completion": "hello there, friend", "label": True},
    {"prompt": "say a number", "completion": "a cat", "label": False},
    {"prompt": "say yes", "completion": "yes", "label": True},
    {"prompt": "spell cat", "completion": "dog", "label": False},
    {"prompt": "what is up", "completion": "the sky", "label": True},
]

PARITY = ("--tuner", "full", "--max-steps", str(STEPS), "--batch-size", "3", "--learning-rate", "5e-4",
          "--save-steps", "100", "--split-ratio", "0", "--beta", "0.2", "--undesirable-weight", "1.5")  # fmt: skip
METRICS = ("loss", "grad_norm", "kl", "rewards/chosen", "rewards/rejected", "rewards/margins", "logps/chosen",
           "logps/rejected")  # fmt: skip


@pytest.fixture(scope="module")
def rows(write_jsonl, tmp_path_factory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("rows") / "kto.jsonl", ROWS)


def _needs(test: str, params: dict) -> list[tuple]:
    """The runs a test of this module asks for: ``(engine, what, tp)``."""
    if test == "test_the_first_losses_equal_the_transformers_engine":
        return [("transformers", "parity", 1), ("megatron", "parity", params["tp"])]
    if test == "test_lora_kto_learns_the_held_out_preference":
        return [("megatron", "learn", 1)]
    return []


@pytest.fixture(scope="module")
def runs(request, cli_runs, selected_params, recipe_args, tiny_model_dir, rows, tmp_path_factory):
    """``runs(key) -> output directory``: the module's ``swiftcore train --recipe kto`` runs (see :func:`_needs`),
    those the selected tests need planned together (conftest's ``CliRuns``: by number of ranks, both engines in one
    process or world) and made when the first is asked for."""
    root = tmp_path_factory.mktemp("runs")
    model = tiny_model_dir("qwen3_5")
    for key in sorted({key for test, params in selected_params for key in _needs(test, params)}):
        engine, what, tp = key
        out = root / f"{engine}-{what}-tp{tp}"
        if what == "learn":
            train, held, _ = request.getfixturevalue("vowel_files")
            flags = ("--engine", "megatron", "--tuner", "lora", "--max-steps", str(LEARN_STEPS), "--batch-size", "8",
                     "--learning-rate", "2e-3", "--lr-scheduler", "constant", "--save-steps", "10000",
                     "--val-dataset", str(held))  # fmt: skip
            cli_runs.plan(key, recipe_args("kto", model, train, out, *flags), out, group="all")
            continue
        flags = PARITY
        if engine == "megatron":
            flags += ("--engine", "megatron", "--tp", str(tp))
        flags += ("--ref-model", str(request.getfixturevalue("other_reference")))
        cli_runs.plan(key, recipe_args("kto", model, rows, out, *flags), out, ranks=tp, group="all")
    return cli_runs.get


@pytest.fixture(scope="module")
def transformers_kto(runs, logged) -> dict[int, dict]:
    """The ``kto`` recipe on the transformers engine (TRL's KTOTrainer): step -> logged record."""
    return {r["step"]: r for r in logged(runs(("transformers", "parity", 1))) if "loss" in r}


@pytest.mark.slow
@pytest.mark.parametrize("tp", [1, 2], ids=["tp1", "tp2"])
def test_the_first_losses_equal_the_transformers_engine(tp, transformers_kto, runs, logged):
    """9 rows (a pair gives one of each) in batches of 3: the recipe's row order and KL pairing over one epoch;
    ``--ref-model`` (another model than the policy) makes z_ref positive (the policy's own initial weights as the
    reference leave it clamped at 0 on this data), and step 2's batch has no undesirable row."""
    got = {r["step"]: r for r in logged(runs(("megatron", "parity", tp))) if "loss" in r}
    assert sorted(got) == sorted(transformers_kto) == list(range(1, STEPS + 1))
    worst = 0.0
    for step, expected in transformers_kto.items():
        for key in METRICS:
            if key in expected:
                assert got[step][key] == pytest.approx(expected[key], rel=1e-5, abs=1e-5), (step, key)
                worst = max(worst, abs(got[step][key] - expected[key]) / max(1.0, abs(expected[key])))
    print(f"kto tp{tp}: largest difference (relative above 1) over {STEPS} steps: {worst:.1e}")
    assert all(key in transformers_kto[1] for key in METRICS), transformers_kto[1]
    assert abs(transformers_kto[STEPS]["loss"] - transformers_kto[1]["loss"]) > 0.01, "the losses must move"
    assert all(transformers_kto[step]["kl"] > 0.1 for step in got), "the KL estimate must reach the loss"
    assert "rewards/rejected" not in transformers_kto[2] and "rewards/rejected" not in got[2]


def test_the_shared_loss_is_the_papers():
    """``kto_loss`` on fixed log-probs: eq. 7-8 of the KTO paper with TRL's ``z_ref`` (the batch's mean mismatched
    log-ratio, clamped at 0), weighted and averaged; the gradient reaches the per-token log-probs."""
    import torch
    from swiftcore_recipe_preference import KTOOptions, kto_loss

    gen = torch.Generator().manual_seed(0)
    completion = torch.zeros(5, 7)
    for row, start in enumerate([2, 3, 4, 2, 5]):
        completion[row, start:] = 1
    raw = torch.rand(5, 6, generator=gen, requires_grad=True)
    logps = -raw * completion[:, 1:]
    labels = torch.tensor([True, False, True, True, False])
    ref, ref_kl = -3 * torch.rand(5, generator=gen), -3 * torch.rand(5, generator=gen)
    kl = ref_kl + torch.tensor([0.3, -0.1, 0.5, 0.2, 0.4])  # z_ref 0.26: not clamped
    options = KTOOptions(beta=0.4, desirable_weight=1.0, undesirable_weight=1.5)
    loss, metrics = kto_loss(logps, completion, labels, kl, ref, ref_kl, options)
    ratio = logps.detach().sum(1) - ref
    z_ref = (kl - ref_kl).mean().clamp(min=0)
    desirable = 1 - torch.sigmoid(0.4 * (ratio[labels] - z_ref))
    undesirable = 1 - torch.sigmoid(0.4 * (z_ref - ratio[~labels]))
    expected = torch.cat([desirable, 1.5 * undesirable]).mean()
    assert float(z_ref) > 0, "pick values whose z_ref is not clamped"
    assert float(loss.detach()) == pytest.approx(float(expected), abs=1e-6)
    assert metrics["kl"] == pytest.approx(float(z_ref), abs=1e-6)
    assert metrics["rewards/margins"] == pytest.approx(float(0.4 * (ratio[labels].mean() - ratio[~labels].mean())))
    loss.backward()
    assert raw.grad is not None and float(raw.grad.abs().sum()) > 0


@pytest.mark.slow
def test_lora_kto_learns_the_held_out_preference(vowel_files, runs, logged, pairwise_accuracy, tiny_model_dir):
    from peft import PeftModel
    from swiftcore_recipe_preference import encode_dpo_pairs, parse_pair
    from swiftcore_train import TrainConfig

    from swiftcore._plugins import load_plugins
    from swiftcore.api.models import load_model, load_tokenizer, resolve_model_spec
    from swiftcore.api.template import get_template

    model_dir = tiny_model_dir("qwen3_5")
    plugins = load_plugins(env={})
    spec, tokenizer = resolve_model_spec(str(model_dir), plugins), load_tokenizer(str(model_dir))
    *_, held_rows = vowel_files
    held = [parse_pair(row, f"held-out:{i}") for i, row in enumerate(held_rows)]
    cfg = TrainConfig(model=str(model_dir), dataset=("unused",), recipe="dpo")
    samples = encode_dpo_pairs(held, get_template(spec.default_template, plugins), tokenizer, cfg)
    before = pairwise_accuracy(load_model(spec, str(model_dir), plugins, torch_dtype="float32").eval(), samples)

    out = runs(("megatron", "learn", 1))  # LoRA, 24 steps of 8 rows on the training pairs, held-out evaluation
    records = logged(out)
    base = load_model(spec, str(model_dir), plugins, torch_dtype="float32")
    after = pairwise_accuracy(PeftModel.from_pretrained(base, str(out / f"checkpoint-{LEARN_STEPS}")).eval(), samples)
    losses = [r["loss"] for r in records if "loss" in r]
    (final,) = [r for r in records if "eval_loss" in r]
    print(f"held-out accuracy {before:.1%} -> {after:.1%}, eval reward margin {final['eval_rewards/margins']:.3f}, "
          f"train loss {losses[0]:.3f} -> {losses[-1]:.3f}")  # fmt: skip
    assert 0.25 <= before <= 0.75, f"the untrained model should be near chance, got {before:.1%}"
    assert after >= 0.9, f"held-out pairwise accuracy only {after:.1%}"
    assert final["eval_rewards/margins"] > 0, final
    assert losses[-1] < losses[0]


@pytest.mark.parametrize(
    ("family", "options", "expected"),
    [
        ("qwen3_5", {"recipe_options": {"ep": 2}}, "--ep 2: bridge 'qwen3_5' does not support expert parallelism"),
        ("qwen3_5", {"truncation": "truncate_left"}, "--truncation truncate_left: KTO on this engine does not"),
        ("qwen3_5", {"batch_size": 1}, "--batch-size 1: the kto loss needs at least 2 rows a batch"),
        ("qwen3_5_moe", {"recipe_options": {"pp": 2}}, "--pp 2: bridge 'qwen3_5_moe' builds MoE layers, whose router"),
        ("qwen3_5", {"tuner": "lora", "recipe_options": {"ref_model": "elsewhere"}}, "--ref-model: with --tuner lora"),
    ],
    ids=["ep-dense", "truncation", "batch-of-1", "moe-pp2", "lora-ref-model"],
)
def test_what_kto_megatron_does_not_do_is_refused(write_jsonl, family, options, expected, tiny_model_dir, tmp_path):
    import torch.distributed as dist
    from swiftcore_train import TrainConfig, run_training

    from swiftcore._plugins import load_plugins
    from swiftcore.api import SwiftcoreError

    cfg = TrainConfig(
        model=str(tiny_model_dir(family)),
        dataset=(str(write_jsonl(tmp_path / "rows.jsonl", ROWS)),),
        output_dir=str(tmp_path / "out"),
        engine="megatron",
        recipe="kto",
        max_steps=1,
        **{"tuner": "full", "batch_size": 4, **options},
    )
    before = dist.is_initialized()
    with pytest.raises(SwiftcoreError, match=re.escape(expected)):
        run_training(cfg, load_plugins(env={}))
    assert before or not dist.is_initialized(), "a process group was created before the error"
    assert not (tmp_path / "out").exists(), "nothing is written before the checks pass"
