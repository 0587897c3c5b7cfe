"""``swiftcore train --engine megatron --recipe dpo`` (the ``dpo.megatron`` recipe) against the ``dpo`` recipe on the
transformers engine (TRL's DPOTrainer), on gloo with real torchrun processes.

- Loss parity: the first 3 step losses, reward margins, chosen log-probs and gradient norms at TP1, TP2 and with two
  micro-batches a step equal the transformers engine's on the same init, data order and optimiser, full weights,
  fp32, to 1e-5 (step 1 is log 2 on both: policy = reference; steps 2 and 3 test the gradients and the reference
  log-probs); with ``--ref-model`` (another model) and ``--beta`` 0.3, step 1 moves off log 2 and the losses agree
  too.
- The loss is TRL's: ``dpo_loss`` (swiftcore-recipe-preference, shared by both engines) gives the papers' sigmoid,
  hinge and ipo losses on fixed log-probs.
- Learning signal: LoRA DPO on the vowel task (the preference recipe's ``test_dpo_learns.py`` task) lifts held-out
  pairwise accuracy from about 50% to >= 90%, measured on the exported adapter with plain peft, and the run's own
  held-out reward accuracy (``eval_rewards/accuracies``) is >= 90% too.
- Refusals, before any process group exists: --ep on a dense family, cutting --truncation, --padding-free, MoE
  families under --pp (MoE at --ep 1 and 2 and --tp 2: test_engine_pref_moe.py), image pairs, --ref-model with LoRA.

The runs the selected tests need are made in as few processes as they allow (conftest's ``CliRuns``, each through
the CLI's own ``main``): both engines' runs on one rank in one process, the TP2 run in one torchrun world of 2 ranks;
a process start costs more than the few steps of the tiny model.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

STARTS_RANKS = True  # torchrun worlds (the repository conftest's rank lock)
STEPS = 3
LEARN_STEPS = 30

PARITY = ("--tuner", "full", "--max-steps", str(STEPS), "--batch-size", "4", "--learning-rate", "5e-4",
          "--save-steps", "100", "--split-ratio", "0")  # fmt: skip


@pytest.fixture(scope="module")
def pairs(write_jsonl, preference_pairs, tmp_path_factory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("pairs") / "pairs.jsonl", preference_pairs)


def _needs(test: str, params: dict) -> list[tuple]:
    """The runs a test of this module asks for: ``(engine, what, tp, accum)``."""
    if test == "test_the_first_losses_equal_the_transformers_engine":
        return [("transformers", "parity", 1, 1), ("megatron", "parity", params["tp"], params["accum"])]
    if test == "test_ref_model_and_beta_reach_the_loss":
        return [("transformers", "ref", 1, 1), ("megatron", "ref", 1, 1)]
    if test == "test_lora_dpo_learns_the_held_out_preference":
        return [("megatron", "learn", 1, 1)]
    return []


@pytest.fixture(scope="module")
def runs(request, cli_runs, selected_params, recipe_args, tiny_model_dir, pairs, tmp_path_factory):
    """``runs(key) -> output directory``: the module's ``swiftcore train --recipe dpo`` runs (see :func:`_needs`),
    those the selected tests need planned together (conftest's ``CliRuns``: by number of ranks, both engines in one
    process or world) and made when the first is asked for."""
    root = tmp_path_factory.mktemp("runs")
    model = tiny_model_dir("qwen3_5")
    for key in sorted({key for test, params in selected_params for key in _needs(test, params)}):
        engine, what, tp, accum = key
        out = root / f"{engine}-{what}-tp{tp}-ga{accum}"
        data = pairs
        if what == "learn":
            data, held, _ = request.getfixturevalue("vowel_files")
            flags = ("--engine", "megatron", "--tuner", "lora", "--max-steps", str(LEARN_STEPS), "--batch-size", "8",
                     "--learning-rate", "2e-3", "--lr-scheduler", "constant", "--save-steps", "10000",
                     "--val-dataset", str(held))  # fmt: skip
        else:
            flags = PARITY
            if what == "ref":  # --ref-model: another model than the policy
                flags += ("--beta", "0.3", "--ref-model", str(request.getfixturevalue("other_reference")))
            if engine == "megatron":
                flags += ("--engine", "megatron")
            if engine == "megatron" and what == "parity":
                flags += ("--tp", str(tp), "--gradient-accumulation-steps", str(accum))
                flags += ("--batch-size", str(4 // accum))  # after PARITY's --batch-size 4: the last one given wins
        cli_runs.plan(key, recipe_args("dpo", model, data, out, *flags), out, ranks=tp, group="all")
    return cli_runs.get


@pytest.fixture(scope="module")
def transformers_dpo(runs, logged) -> dict[int, dict]:
    """The ``dpo`` recipe on the transformers engine (TRL's DPOTrainer): step -> logged record."""
    return {r["step"]: r for r in logged(runs(("transformers", "parity", 1, 1))) if "loss" in r}


@pytest.mark.slow
@pytest.mark.parametrize(("tp", "accum"), [(1, 1), (2, 1), (1, 2)], ids=["tp1", "tp2", "tp1-ga2"])
def test_the_first_losses_equal_the_transformers_engine(tp, accum, transformers_dpo, runs, logged):
    """``accum=2``: each step's 4 pairs as two micro-batches of 2 (the step's loss is the mean over its pairs)."""
    got = {r["step"]: r for r in logged(runs(("megatron", "parity", tp, accum))) if "loss" in r}
    assert sorted(got) == sorted(transformers_dpo) == list(range(1, STEPS + 1))
    for step, expected in transformers_dpo.items():
        for key in ("loss", "rewards/margins", "logps/chosen", "grad_norm"):
            assert got[step][key] == pytest.approx(expected[key], rel=1e-5, abs=1e-5), (step, key)
    assert abs(transformers_dpo[STEPS]["loss"] - transformers_dpo[1]["loss"]) > 0.1, "the losses must move"


@pytest.mark.slow
def test_ref_model_and_beta_reach_the_loss(runs, logged):
    """``--ref-model`` (another model than the policy) and ``--beta`` 0.3, given on the command line (the ``dpo``
    recipe's options reach ``dpo.megatron``): step 1 is no longer log 2, and the first 3 losses still equal the
    transformers engine's."""
    expected = {r["step"]: r["loss"] for r in logged(runs(("transformers", "ref", 1, 1))) if "loss" in r}
    got = {r["step"]: r["loss"] for r in logged(runs(("megatron", "ref", 1, 1))) if "loss" in r}
    assert sorted(got) == sorted(expected) == list(range(1, STEPS + 1))
    assert abs(expected[1] - 0.6931472) > 1e-3, "the reference must differ from the policy"
    for step, loss in expected.items():
        assert got[step] == pytest.approx(loss, rel=1e-5, abs=1e-5), (step, expected, got)


@pytest.mark.parametrize("loss_type", ["sigmoid", "hinge", "ipo"])
def test_the_shared_loss_is_the_papers(loss_type):
    """``dpo_loss`` on fixed log-probs: DPO's ``-log sigmoid(beta * delta)``, SLiC's hinge, IPO's squared loss of
    the per-token mean log-ratios (TRL's reading of IPO); the gradient reaches the per-token log-probs."""
    import torch
    import torch.nn.functional as F
    from swiftcore_recipe_preference import DPOOptions, dpo_loss

    beta, gen = 0.3, torch.Generator().manual_seed(0)
    completion = torch.zeros(6, 7)
    for row, start in enumerate([2, 3, 4, 2, 5, 1]):
        completion[row, start:] = 1
    raw = torch.rand(6, 6, generator=gen, requires_grad=True)
    logps = -raw * completion[:, 1:]
    ref_chosen, ref_rejected = -3 * torch.rand(3, generator=gen), -3 * torch.rand(3, generator=gen)
    loss, metrics = dpo_loss(logps, completion, ref_chosen, ref_rejected, DPOOptions(beta=beta, loss_type=loss_type))
    chosen, rejected = logps.detach().sum(1).chunk(2)
    ratio_c, ratio_r = chosen - ref_chosen, rejected - ref_rejected
    n_c, n_r = completion[:, 1:].sum(1).chunk(2)
    expected = {
        "sigmoid": -F.logsigmoid(beta * (ratio_c - ratio_r)).mean(),
        "hinge": torch.relu(1 - beta * (ratio_c - ratio_r)).mean(),
        "ipo": ((ratio_c / n_c - ratio_r / n_r) - 1 / (2 * beta)).pow(2).mean(),
    }[loss_type]
    assert float(loss.detach()) == pytest.approx(float(expected), abs=1e-6)
    assert metrics["rewards/margins"] == pytest.approx(float(beta * (ratio_c - ratio_r).mean()), abs=1e-6)
    loss.backward()
    assert raw.grad is not None and float(raw.grad.abs().sum()) > 0


@pytest.mark.slow
def test_lora_dpo_learns_the_held_out_preference(vowel_files, runs, logged, pairwise_accuracy, tiny_model_dir):
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

    out = runs(("megatron", "learn", 1, 1))  # LoRA, 30 steps of 8 pairs on the training rows, held-out evaluation
    records = logged(out)
    base = load_model(spec, str(model_dir), plugins, torch_dtype="float32")
    after = pairwise_accuracy(PeftModel.from_pretrained(base, str(out / f"checkpoint-{LEARN_STEPS}")).eval(), samples)
    losses = [r["loss"] for r in records if "loss" in r]
    (final,) = [r for r in records if "eval_loss" in r]
    print(f"held-out accuracy {before:.1%} -> {after:.1%}, reward accuracy {final['eval_rewards/accuracies']:.1%}, "
          f"train loss {losses[0]:.3f} -> {losses[-1]:.3f}")  # fmt: skip
    assert 0.25 <= before <= 0.75, f"the untrained model should be near chance, got {before:.1%}"
    assert after >= 0.9, f"held-out pairwise accuracy only {after:.1%}"
    assert final["eval_rewards/accuracies"] >= 0.9, final
    assert losses[-1] < losses[0]


@pytest.mark.parametrize(
    ("family", "options", "expected"),
    [
        ("qwen3_5", {"recipe_options": {"ep": 2}}, "--ep 2: bridge 'qwen3_5' does not support expert parallelism"),
        ("qwen3_5", {"truncation": "truncate_left"}, "--truncation truncate_left: DPO on this engine does not"),
        ("qwen3_5", {"padding_free": True}, "--packing / --padding-free: not supported by the megatron engine"),
        ("qwen3_5_moe", {"recipe_options": {"pp": 2}}, "--pp 2: bridge 'qwen3_5_moe' builds MoE layers, whose router"),
        ("qwen3_5", {"tuner": "lora", "recipe_options": {"ref_model": "elsewhere"}}, "--ref-model: with --tuner lora"),
        ("qwen3_5", {"images": True}, "image / audio / video pairs are not supported by this engine yet"),
    ],
    ids=["ep-dense", "truncation", "padding-free", "moe-pp2", "lora-ref-model", "images"],
)
def test_what_dpo_megatron_does_not_do_is_refused(
    write_jsonl, preference_pairs, family, options, expected, tiny_model_dir, tmp_path, no_process_group_after
):
    from swiftcore_train import TrainConfig, run_training

    from swiftcore._plugins import load_plugins
    from swiftcore.api import SwiftcoreError

    rows = [dict(r) for r in preference_pairs]
    if options.pop("images", False):
        from PIL import Image

        Image.new("RGB", (8, 8), "red").save(tmp_path / "red.png")
        rows[0]["images"] = [str(tmp_path / "red.png")]
        rows[0]["prompt"] = [{"role": "user", "content": "<image>say apple"}]
    cfg = TrainConfig(
        model=str(tiny_model_dir(family)),
        dataset=(str(write_jsonl(tmp_path / "pairs.jsonl", rows)),),
        output_dir=str(tmp_path / "out"),
        engine="megatron",
        recipe="dpo",
        max_steps=1,
        **{"tuner": "full", **options},
    )
    with pytest.raises(SwiftcoreError, match=re.escape(expected)):
        run_training(cfg, load_plugins(env={}))
    assert not (tmp_path / "out").exists(), "nothing is written before the checks pass"
