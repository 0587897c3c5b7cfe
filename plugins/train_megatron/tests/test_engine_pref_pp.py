"""Pipeline parallelism (``--pp 2``) for ``swiftcore train --engine megatron --recipe dpo|kto``, on gloo with two
real ranks (``"torchrun" --nproc-per-node 2``).

- Loss parity: two pipeline stages and one process log the same first 3 steps (loss, the recipe's reward and
  log-prob metrics, KTO's KL estimate, gradient norm) to 1e-5, fp32, full weights, with ``--ref-model`` (another
  model: the reference's log-probs, computed through the stages too, move DPO's step 1 off log 2 and make KTO's KL
  estimate positive) and two micro-batches of 2 a step through megatron's 1F1B schedule. Each DPO pair's chosen and
  rejected rows (each KTO row's KL row) sit in one micro-batch, so the loss sees both; with 7 pairs (rows) step 2's
  second micro-batch holds one, its rows padded to the others' shape. The held-out evaluation (3 in batches of 2:
  the last batch holds one) gives the same ``eval_loss`` and metrics.
- ``--vpp`` is refused for DPO and KTO before any process group, naming what to drop; ``rm`` still refuses ``--pp``.

The runs the selected tests need are made in as few processes as they allow (conftest's ``CliRuns``, each through
the CLI's own ``main``): the one-process runs of both recipes in one process, their two-stage runs in one torchrun
world of 2 ranks; a process start costs more than the few steps of the tiny model.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

# make test (CI) leaves this module to make test-all: megatron DPO/KTO over two pipeline stages; megatron DPO parity
# and SFT at pp2 stay in make test (docs/testing.md, "Two tiers").
pytestmark = pytest.mark.extended

STARTS_RANKS = True  # torchrun worlds (the repository conftest's rank lock)
STEPS = 3
FLAGS = ("--engine", "megatron", "--tuner", "full", "--max-steps", str(STEPS), "--batch-size", "2",
         "--gradient-accumulation-steps", "2", "--learning-rate", "5e-4", "--save-steps", "100",
         "--eval-steps", "3")  # fmt: skip
KTO_ROWS = [
    {"prompt": "say apple", "completion": "apple apple", "label": True},
    {"prompt": "name a colour", "completion": "a loud noise, very loud", "label": False},
    {"prompt": "greet me", "completion": "hello there, friend", "label": True},
    {"prompt": "say a number", "completion": "a cat", "label": False},
    {"prompt": "say yes", "completion": "yes", "label": True},
    {"prompt": "spell cat", "completion": "dog", "label": False},
    {"prompt": "what is up", "completion": "the sky", "label": True},
]
#: Per recipe: the metrics compared at each step and in the evaluation (besides the loss and eval_loss).
METRICS = {
    "dpo": (("rewards/margins", "logps/chosen", "grad_norm"), ("eval_rewards/accuracies", "eval_rewards/margins")),
    "kto": (("kl", "rewards/chosen", "logps/chosen", "grad_norm"), ("eval_kl", "eval_rewards/chosen")),
}


@pytest.fixture(scope="module")
def data(write_jsonl, preference_pairs, tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """Per recipe, ``(train, val)``: 7 training pairs (rows) and 3 held out."""
    root = tmp_path_factory.mktemp("data")
    return {
        "dpo": (
            write_jsonl(root / "train.jsonl", preference_pairs[:7]),
            write_jsonl(root / "val.jsonl", preference_pairs[:3]),
        ),
        "kto": (write_jsonl(root / "kto.jsonl", KTO_ROWS), write_jsonl(root / "kto-val.jsonl", KTO_ROWS[:3])),
    }


def _needs(test: str, params: dict) -> list[tuple]:
    """The runs a test of this module asks for: ``(recipe, pp)``."""
    if test == "test_two_pipeline_stages_give_one_process_losses":
        return [(params["recipe"], 1), (params["recipe"], 2)]
    return []


@pytest.fixture(scope="module")
def runs(cli_runs, selected_params, recipe_args, tiny_model_dir, data, other_reference, tmp_path_factory):
    """``runs(key) -> output directory``: the module's runs (see :func:`_needs`), those the selected tests need
    planned together (conftest's ``CliRuns``: by number of ranks, both recipes in one process or world) and made
    when the first is asked for."""
    root = tmp_path_factory.mktemp("runs")
    model = tiny_model_dir("qwen3_5")
    for key in sorted({key for test, params in selected_params for key in _needs(test, params)}):
        recipe, pp = key
        (train, val), out = data[recipe], root / f"{recipe}-pp{pp}"
        flags = (*FLAGS, "--val-dataset", str(val), "--ref-model", str(other_reference), "--pp", str(pp))
        cli_runs.plan(key, recipe_args(recipe, model, train, out, *flags), out, ranks=pp, group="all")
    return cli_runs.get


@pytest.mark.slow
@pytest.mark.parametrize("recipe", sorted(METRICS))
def test_two_pipeline_stages_give_one_process_losses(recipe, runs, logged) -> None:
    records = {pp: logged(runs((recipe, pp))) for pp in (1, 2)}
    steps = {pp: {r["step"]: r for r in rows if "loss" in r} for pp, rows in records.items()}
    evals = {pp: [r for r in rows if "eval_loss" in r] for pp, rows in records.items()}
    assert sorted(steps[1]) == sorted(steps[2]) == list(range(1, STEPS + 1))
    if recipe == "dpo":
        assert abs(steps[1][1]["loss"] - 0.6931472) > 1e-3, "the reference must differ from the policy"
    else:
        assert all(steps[1][step]["kl"] > 0.1 for step in steps[1]), "the KL estimate must reach the loss"
    assert abs(steps[1][STEPS]["loss"] - steps[1][1]["loss"]) > 1e-2, "the losses must move"
    step_metrics, eval_metrics = METRICS[recipe]
    worst = 0.0
    for step, expected in steps[1].items():
        for key in ("loss", *step_metrics):
            if key in expected or key in steps[2][step]:
                assert steps[2][step][key] == pytest.approx(expected[key], rel=1e-5, abs=1e-5), (step, key)
                worst = max(worst, abs(steps[2][step][key] - expected[key]))
    assert len(evals[1]) == len(evals[2]) == 1
    for key in ("eval_loss", *eval_metrics):
        assert evals[2][0][key] == pytest.approx(evals[1][0][key], rel=1e-5, abs=1e-5), key
        worst = max(worst, abs(evals[2][0][key] - evals[1][0][key]))
    print(f"{recipe} pp2 vs pp1: largest gap over {STEPS} steps and the evaluation {worst:.1e}")


@pytest.mark.parametrize(
    ("recipe", "layout", "expected"),
    [
        ("dpo", {"pp": 2, "vpp": 2}, "--vpp 2: DPO runs megatron's plain 1F1B pipeline schedule"),
        ("kto", {"pp": 2, "vpp": 2}, "--vpp 2: KTO runs megatron's plain 1F1B pipeline schedule"),
        ("rm", {"pp": 2}, "--pp 2: rm does not run through pipeline stages yet"),
    ],
    ids=["dpo-vpp", "kto-vpp", "rm-pp"],
)
def test_what_the_pipeline_does_not_run_is_refused(
    recipe, layout, expected, write_jsonl, preference_pairs, tiny_model_dir, tmp_path, no_process_group_after
):
    from swiftcore_train import TrainConfig, run_training

    from swiftcore._plugins import load_plugins
    from swiftcore.api import SwiftcoreError

    cfg = TrainConfig(
        model=str(tiny_model_dir("qwen3_5")),
        dataset=(str(write_jsonl(tmp_path / "pairs.jsonl", preference_pairs)),),
        output_dir=str(tmp_path / "out"),
        engine="megatron",
        recipe=recipe,
        tuner="full",
        max_steps=1,
        batch_size=2,
        recipe_options=layout,
    )
    with pytest.raises(SwiftcoreError, match=re.escape(expected)):
        run_training(cfg, load_plugins(env={}))
    assert not (tmp_path / "out").exists(), "nothing is written before the checks pass"
