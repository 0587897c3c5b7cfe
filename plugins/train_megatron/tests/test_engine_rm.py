"""``swiftcore train --engine megatron --recipe rm`` (the ``rm.megatron`` recipe) against the ``rm`` recipe on the
transformers engine (TRL's RewardTrainer on ``*ForSequenceClassification``), on gloo with real torchrun processes.

- Loss parity: the first 3 step losses, TRL's logged metrics (``accuracy``, ``margin``, ``min/mean/max_reward``) and
  gradient norms at TP1 and TP2 equal the transformers engine's on the same init (the score layer as that recipe
  starts it), data order and optimiser, full weights, fp32, to 1e-5, with ``--center-rewards-coefficient``.
- The loss is TRL's: ``reward_loss`` runs ``RewardTrainer.compute_loss`` on given rewards; on fixed rewards it is
  ``mean(-log σ(r_c - r_r)) + c · mean((r_c + r_r)^2)``.
- Learning signal: on the vowel task the held-out ranking accuracy of the saved checkpoint, loaded with plain
  ``AutoModelForSequenceClassification``, rises from about 50% to >= 90%, and the run's ``eval_accuracy`` too.
- LoRA (``--tuner lora``: the decoder's LoRA and the score layer in full) from the rm recipe's own initial adapter
  (``--lora-init-adapter``): losses, metrics and gradient norms at TP1 and TP2 equal the transformers engine's LoRA
  run to 1e-5; the checkpoint is a merged sequence classifier, as that recipe saves, scoring as its checkpoint does.
- Refusals, before any process group exists: --pp, --ep, cutting --truncation, MoE families, a family without
  a sequence classifier.

The runs the selected tests need are made in as few processes as they allow (conftest's ``CliRuns``, each through
the CLI's own ``main``: the transformers engine's runs in one, the megatron runs on one rank in another, the TP2
runs in one torchrun world of 2 ranks): a process start costs more than the few steps of the tiny model.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

# make test (CI) leaves this module to make test-all: megatron reward-model parity; megatron DPO parity stays in make
# test (test_engine_dpo.py) (docs/testing.md, "Two tiers").
pytestmark = pytest.mark.extended

STARTS_RANKS = True  # torchrun worlds (the repository conftest's rank lock)
STEPS = 3
PARITY = ("--tuner", "full", "--max-steps", str(STEPS), "--batch-size", "4", "--learning-rate", "5e-4",
          "--save-steps", "100", "--split-ratio", "0", "--center-rewards-coefficient", "0.1")  # fmt: skip
METRICS = ("loss", "grad_norm", "accuracy", "margin", "min_reward", "mean_reward", "max_reward")


@pytest.fixture(scope="module")
def pairs(write_jsonl, preference_pairs, tmp_path_factory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("pairs") / "pairs.jsonl", preference_pairs)


LORA = ("--tuner", "lora", "--lora-rank", "4", "--lora-alpha", "8", "--learning-rate", "2e-3")
LEARN_STEPS = 12


def _needs(test: str, params: dict) -> list[tuple]:
    """The runs a test of this module asks for: ``(engine, what, tp)``."""
    if test == "test_the_first_losses_equal_the_transformers_engine":
        return [("transformers", "full", 1), ("megatron", "full", params["tp"])]
    if test == "test_lora_rm_equals_the_transformers_engine":
        return [("transformers", "lora", 1), ("megatron", "lora", params["tp"])]
    if test == "test_rm_learns_the_held_out_preference":
        return [("megatron", "learn", 1)]
    return []


@pytest.fixture(scope="module")
def runs(request, cli_runs, selected_params, recipe_args, tiny_model_dir, pairs, tmp_path_factory):
    """``runs(key) -> output directory``: the module's ``swiftcore train --recipe rm`` runs (see :func:`_needs`), those
    the selected tests need planned together (conftest's ``CliRuns``) and made when the first is asked for."""
    root = tmp_path_factory.mktemp("runs")
    model = tiny_model_dir("qwen3_5")
    for key in sorted({key for test, params in selected_params for key in _needs(test, params)}):
        engine, what, tp = key
        out = root / f"{engine}-{what}-tp{tp}"
        if what == "learn":
            train, held, _ = request.getfixturevalue("vowel_files")
            flags = ("--engine", "megatron", "--tuner", "full", "--max-steps", str(LEARN_STEPS), "--batch-size", "8",
                     "--learning-rate", "5e-4", "--lr-scheduler", "constant", "--save-steps", "10000",
                     "--val-dataset", str(held))  # fmt: skip
            cli_runs.plan(key, recipe_args("rm", model, train, out, *flags), out, group="megatron")
            continue
        flags = (*PARITY, *(LORA if what == "lora" else ()))
        if engine == "megatron":
            flags += ("--engine", "megatron", "--tp", str(tp))
            if what == "lora":
                flags += ("--lora-init-adapter", str(request.getfixturevalue("rm_lora_init")))
        cli_runs.plan(key, recipe_args("rm", model, pairs, out, *flags), out, ranks=tp, group=engine)
    return cli_runs.get


@pytest.fixture(scope="module")
def transformers_rm(runs, logged) -> dict[int, dict]:
    """The ``rm`` recipe on the transformers engine (TRL's RewardTrainer): step -> logged record."""
    return {r["step"]: r for r in logged(runs(("transformers", "full", 1))) if "loss" in r}


@pytest.mark.slow
@pytest.mark.parametrize("tp", [1, 2], ids=["tp1", "tp2"])
def test_the_first_losses_equal_the_transformers_engine(tp, transformers_rm, runs, logged):
    out = runs(("megatron", "full", tp))
    got = {r["step"]: r for r in logged(out) if "loss" in r}
    assert sorted(got) == sorted(transformers_rm) == list(range(1, STEPS + 1))
    worst = 0.0
    for step, expected in transformers_rm.items():
        for key in METRICS:
            assert got[step][key] == pytest.approx(expected[key], rel=1e-5, abs=1e-5), (step, key)
            worst = max(worst, abs(got[step][key] - expected[key]) / max(1.0, abs(expected[key])))
    print(f"rm tp{tp}: largest difference (relative above 1) over {STEPS} steps: {worst:.1e}")
    assert abs(transformers_rm[STEPS]["loss"] - transformers_rm[1]["loss"]) > 0.01, "the losses must move"
    if tp == 2:  # the checkpoint is the rm recipe's: a sequence classifier transformers loads as it is
        from transformers import AutoModelForSequenceClassification

        saved = AutoModelForSequenceClassification.from_pretrained(str(out / f"checkpoint-{STEPS}"))
        assert saved.config.num_labels == 1 and saved.config.pad_token_id is not None


@pytest.fixture(scope="module")
def rm_lora_init(tiny_model_dir, pairs, tmp_path_factory) -> Path:
    """The adapter the ``rm`` recipe's LoRA run starts from (its own ``build_reward_trainer``: the seed, the sequence
    classifier, TRL's peft wrapping with the score layer in ``modules_to_save``), saved before any step; its layer
    names are the checkpoint's, which the bridge reads."""
    from safetensors.torch import load_file
    from swiftcore_recipe_preference import RMOptions, build_reward_trainer, encode_rm_pairs, prepare
    from swiftcore_train import TrainConfig

    from swiftcore._plugins import load_plugins

    root = tmp_path_factory.mktemp("rm_lora_init")
    cfg = TrainConfig(model=str(tiny_model_dir("qwen3_5")), dataset=(str(pairs),), output_dir=str(root / "run"),
                      recipe="rm", tuner="lora", lora_rank=4, lora_alpha=8, seed=7, split_ratio=0.0)  # fmt: skip
    prepared = prepare(cfg, load_plugins(env={}), "rm")
    train = encode_rm_pairs(prepared.train, prepared.template, prepared.tokenizer, cfg)
    trainer = build_reward_trainer(cfg, RMOptions(), train, [], prepared, root / "run")
    out = root / "adapter"
    trainer.model.save_pretrained(out)
    names = load_file(str(out / "adapter_model.safetensors")).keys()
    assert any(".lora_A." in k for k in names) and "base_model.model.score.weight" in names, sorted(names)[:4]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("tp", [1, 2], ids=["tp1", "tp2"])
def test_lora_rm_equals_the_transformers_engine(tp, runs, logged):
    """``--recipe rm --tuner lora``: LoRA on the decoder and the score layer in full, from the rm recipe's own
    initial adapter and score layer: the first losses, TRL's metrics and gradient norms equal the transformers
    engine's (1e-5); the checkpoint is that recipe's (the adapter merged into a sequence classifier) and scores
    pairs as the transformers engine's checkpoint does."""
    import torch
    from transformers import AutoModelForSequenceClassification

    reference_out, out = runs(("transformers", "lora", 1)), runs(("megatron", "lora", tp))
    expected = {r["step"]: r for r in logged(reference_out) if "loss" in r}
    got = {r["step"]: r for r in logged(out) if "loss" in r}
    assert sorted(got) == sorted(expected) == list(range(1, STEPS + 1))
    for step, reference in expected.items():
        for key in METRICS:
            assert got[step][key] == pytest.approx(reference[key], rel=1e-5, abs=1e-5), (step, key)
    assert abs(expected[STEPS]["loss"] - expected[1]["loss"]) > 0.01, "the losses must move"

    checkpoint = out / f"checkpoint-{STEPS}"
    assert not (checkpoint / "adapter_config.json").exists()
    mine = AutoModelForSequenceClassification.from_pretrained(str(checkpoint), dtype=torch.float32).eval()
    theirs = AutoModelForSequenceClassification.from_pretrained(str(reference_out / f"checkpoint-{STEPS}")).eval()
    ids = torch.randint(1, 200, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        scores, reference_scores = mine(input_ids=ids).logits, theirs(input_ids=ids).logits
    torch.testing.assert_close(scores, reference_scores, atol=1e-5, rtol=1e-5)


def test_the_shared_loss_is_bradley_terry():
    import torch
    import torch.nn.functional as F
    from swiftcore_recipe_preference import RMOptions, reward_loss

    scores = torch.tensor([[0.5], [-0.2], [1.5], [0.1], [0.3], [-1.0]], requires_grad=True)
    loss, metrics = reward_loss(scores, torch.ones(6, 4, dtype=torch.long), RMOptions(center_rewards_coefficient=0.1))
    chosen, rejected = scores.detach()[:, 0].chunk(2)
    expected = -F.logsigmoid(chosen - rejected).mean() + 0.1 * ((chosen + rejected) ** 2).mean()
    assert float(loss.detach()) == pytest.approx(float(expected), abs=1e-6)
    assert metrics["accuracy"] == pytest.approx(2 / 3)
    assert metrics["margin"] == pytest.approx(float(chosen.mean() - rejected.mean()))
    assert (metrics["min_reward"], metrics["max_reward"]) == pytest.approx((-1.0, 1.5))
    loss.backward()
    assert scores.grad is not None and float(scores.grad.abs().sum()) > 0


@pytest.mark.slow
def test_rm_learns_the_held_out_preference(vowel_files, runs, logged, tiny_model_dir):
    import torch
    from swiftcore_recipe_preference import encode_rm_pairs, parse_pair
    from swiftcore_train import TrainConfig
    from transformers import AutoModelForSequenceClassification

    from swiftcore._plugins import load_plugins
    from swiftcore.api.models import load_tokenizer, resolve_model_spec
    from swiftcore.api.template import get_template

    model_dir = tiny_model_dir("qwen3_5")
    plugins = load_plugins(env={})
    spec, tokenizer = resolve_model_spec(str(model_dir), plugins), load_tokenizer(str(model_dir))
    *_, held_rows = vowel_files
    held = [parse_pair(row, f"held-out:{i}") for i, row in enumerate(held_rows)]
    cfg = TrainConfig(model=str(model_dir), dataset=("unused",), recipe="rm")
    samples = encode_rm_pairs(held, get_template(spec.default_template, plugins), tokenizer, cfg)

    def accuracy(model) -> float:
        with torch.no_grad():
            wins = [model(input_ids=torch.tensor([s["chosen_ids"]])).logits[0, 0]
                    > model(input_ids=torch.tensor([s["rejected_ids"]])).logits[0, 0] for s in samples]  # fmt: skip
        return sum(map(bool, wins)) / len(wins)

    torch.manual_seed(7)  # the score layer as the recipe starts it (--seed 7)
    before = accuracy(AutoModelForSequenceClassification.from_pretrained(str(model_dir), num_labels=1).eval())
    out = runs(("megatron", "learn", 1))  # 12 steps of 8 pairs on the training rows, evaluated on the held-out ones
    records = logged(out)
    after = accuracy(AutoModelForSequenceClassification.from_pretrained(str(out / f"checkpoint-{LEARN_STEPS}")).eval())
    losses = [r["loss"] for r in records if "loss" in r]
    (final,) = [r for r in records if "eval_loss" in r]
    print(f"rm: held-out ranking accuracy {before:.1%} -> {after:.1%}, eval_accuracy {final['eval_accuracy']:.1%}, "
          f"train loss {losses[0]:.3f} -> {losses[-1]:.3f}")  # fmt: skip
    assert 0.25 <= before <= 0.75, f"the untrained reward model should be near chance, got {before:.1%}"
    assert after >= 0.9, f"held-out ranking accuracy only {after:.1%}"
    assert final["eval_accuracy"] >= 0.9, final
    assert losses[-1] < losses[0]


@pytest.mark.parametrize(
    ("family", "options", "expected"),
    [
        ("qwen3_5", {"recipe_options": {"pp": 2}}, "--pp 2: rm does not run through pipeline stages yet"),
        ("qwen3_5", {"recipe_options": {"ep": 2}}, "--ep 2: rm on this engine trains dense families only so far"),
        ("qwen3_5", {"truncation": "truncate_left"}, "--truncation truncate_left: rm on this engine does not cut"),
        ("qwen3_5_moe", {}, "builds MoE layers, which rm on this engine does not train yet"),
        ("gemma4", {}, "transformers has no sequence-classification model for 'gemma4'"),
    ],
    ids=["pp", "ep", "truncation", "moe", "no-classifier"],
)
def test_what_rm_megatron_does_not_do_is_refused(
    write_jsonl, preference_pairs, family, options, expected, tiny_model_dir, tmp_path
):
    import torch.distributed as dist
    from swiftcore_train import TrainConfig, run_training

    from swiftcore._plugins import load_plugins
    from swiftcore.api import SwiftcoreError

    cfg = TrainConfig(
        model=str(tiny_model_dir(family)),
        dataset=(str(write_jsonl(tmp_path / "pairs.jsonl", preference_pairs)),),
        output_dir=str(tmp_path / "out"),
        engine="megatron",
        recipe="rm",
        max_steps=1,
        **{"tuner": "full", **options},
    )
    before = dist.is_initialized()
    with pytest.raises(SwiftcoreError, match=re.escape(expected)):
        run_training(cfg, load_plugins(env={}))
    assert before or not dist.is_initialized(), "a process group was created before the error"
    assert not (tmp_path / "out").exists(), "nothing is written before the checks pass"
