"""``--resume-from-checkpoint`` for ``swiftcore train --engine megatron --recipe dpo|kto|rm``.

- A run resumed from its ``checkpoint-2`` (in a fresh output directory, as after a kill at step 2) logs the
  uninterrupted run's losses and gradient norms at steps 3 and 4 and ends with its weights (``checkpoint-4``'s
  ``model.safetensors``, the reward model's score layer included), fp32, to 1e-6. The data crosses an epoch at step
  2 (dpo, rm: transformers' order, reshuffled each epoch) and the reference log-probs are the initial weights', not
  the checkpoint's. One process for the three recipes; DPO also over two pipeline stages (``--pp 2`` under
  ``"torchrun"``: a rank file per stage, the reference's log-probs through the stages).
- A checkpoint of another recipe is refused before any process group, naming the recipe it was saved by.

The uninterrupted runs the selected tests need are made together in one process (conftest's ``CliRuns``, each
through the CLI's own ``main``), and the resumed ones together in another, fresh one (a process start costs more
than four steps of the tiny model); the PP2 runs in two torchrun worlds of their own.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

# make test (CI) leaves this module to make test-all: a resumed pp2 DPO run; megatron resume stays in make test
# (test_engine_outcomes.py, kill -9 then resume) (docs/testing.md, "Two tiers").
pytestmark = pytest.mark.extended

STARTS_RANKS = True  # torchrun worlds (the repository conftest's rank lock)
STEPS = 4
COMMON = ("--engine", "megatron", "--tuner", "full", "--max-steps", str(STEPS), "--learning-rate", "5e-4",
          "--save-steps", "2", "--split-ratio", "0")  # fmt: skip
KTO_ROWS = [
    {"prompt": "say apple", "completion": "apple apple", "label": True},
    {"prompt": "name a colour", "completion": "a loud noise, very loud", "label": False},
    {"prompt": "greet me", "completion": "hello there, friend", "label": True},
    {"prompt": "say a number", "completion": "a cat", "label": False},
    {"prompt": "say yes", "completion": "yes", "label": True},
    {"prompt": "spell cat", "completion": "dog", "label": False},
]
#: Per recipe: its extra flags (dpo and rm: 8 pairs in batches of 4, two steps an epoch; kto: 6 rows in batches of 2,
#: three steps an epoch) and the metrics its steps log besides the loss.
CASES = {
    "dpo": (("--batch-size", "4"), ("grad_norm", "rewards/margins", "logps/chosen")),
    "kto": (("--batch-size", "2"), ("grad_norm", "rewards/chosen", "logps/chosen")),
    "rm": (("--batch-size", "4", "--center-rewards-coefficient", "0.1"), ("grad_norm", "accuracy", "margin")),
}


@pytest.fixture(scope="module")
def data(write_jsonl, preference_pairs, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("data")
    pairs = write_jsonl(root / "pairs.jsonl", preference_pairs)
    return {"dpo": pairs, "rm": pairs, "kto": write_jsonl(root / "kto.jsonl", KTO_ROWS)}


def _steps(records: list[dict]) -> dict[int, dict]:
    return {r["step"]: r for r in records if "loss" in r}


def _largest_weight_gap(a: Path, b: Path) -> float:
    """The largest absolute difference of two checkpoints' weights (``model.safetensors``)."""
    from safetensors.torch import load_file

    mine, theirs = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    assert mine.keys() == theirs.keys()
    return max(float((mine[k].double() - theirs[k].double()).abs().max()) for k in mine if mine[k].numel())


#: The tests of this module that resume a run, and the (recipe, pipeline stages) each resumes.
RESUMING = {
    "test_a_resumed_run_repeats_the_uninterrupted_one": None,  # its recipe parameter, on one process
    "test_a_resumed_pp2_dpo_run_repeats_the_uninterrupted_one": ("dpo", 2),
}


@pytest.fixture(scope="module")
def resume_runs(cli_runs, selected_params, recipe_args, tiny_model_dir, data, tmp_path_factory):
    """``resume_runs(recipe, pp) -> (uninterrupted, resumed)``: the output directories of a run of ``STEPS`` steps
    and of the same run resumed with ``latest`` from its ``checkpoint-2`` alone (copied to a fresh directory, as
    after a kill just past step 2), in a process that did not make the first."""
    root = tmp_path_factory.mktemp("resume")
    cases = sorted({RESUMING[t] or (p["recipe"], 1) for t, p in selected_params if t in RESUMING})
    model = tiny_model_dir("qwen3_5")
    for recipe, pp in cases:
        flags = (*COMMON, *CASES[recipe][0], "--pp", str(pp))
        whole, resumed = root / f"{recipe}-pp{pp}" / "uninterrupted", root / f"{recipe}-pp{pp}" / "resumed"
        cli_runs.plan(("whole", recipe, pp), recipe_args(recipe, model, data[recipe], whole, *flags), whole, ranks=pp)
        again = recipe_args(recipe, model, data[recipe], resumed, *flags, "--resume-from-checkpoint", "latest")
        cli_runs.plan(("resumed", recipe, pp), again, resumed, ranks=pp, group="resumed")

    def get(recipe: str, pp: int) -> tuple[Path, Path]:
        whole = cli_runs.get(("whole", recipe, pp))
        for other, stages in cases:  # every resumed run of the group starts from its checkpoint-2, copied first
            if stages == pp and not (root / f"{other}-pp{pp}" / "resumed").exists():
                (root / f"{other}-pp{pp}" / "resumed").mkdir()
                source = cli_runs.get(("whole", other, pp)) / "checkpoint-2"
                shutil.copytree(source, root / f"{other}-pp{pp}" / "resumed" / "checkpoint-2")
        return whole, cli_runs.get(("resumed", recipe, pp))

    return get


def _resume_case(recipe: str, pp: int, resume_runs, logged) -> None:
    metrics = CASES[recipe][1]
    whole, resumed = resume_runs(recipe, pp)
    expected = _steps(logged(whole))
    assert sorted(expected) == list(range(1, STEPS + 1))
    assert abs(expected[STEPS]["loss"] - expected[1]["loss"]) > 1e-3, "the losses must move, or equal ones prove little"

    got = _steps(logged(resumed))
    assert sorted(got) == [3, 4], got
    worst = 0.0
    for step in (3, 4):
        for key in ("loss", *metrics):
            assert got[step][key] == pytest.approx(expected[step][key], rel=1e-6, abs=1e-6), (step, key)
            worst = max(worst, abs(got[step][key] - expected[step][key]))
    gap = _largest_weight_gap(resumed / f"checkpoint-{STEPS}", whole / f"checkpoint-{STEPS}")
    print(f"{recipe} pp{pp} resumed at step 2: largest metric gap {worst:.1e}, largest weight gap {gap:.1e}")
    assert gap <= 1e-6, gap
    state = json.loads((resumed / f"checkpoint-{STEPS}" / "trainer_state.json").read_text())
    assert [r["step"] for r in state["log_history"] if "loss" in r] == [1, 2, 3, 4], "the log so far is kept"


@pytest.mark.slow
@pytest.mark.parametrize("recipe", sorted(CASES))
def test_a_resumed_run_repeats_the_uninterrupted_one(recipe, resume_runs, logged) -> None:
    _resume_case(recipe, 1, resume_runs, logged)


@pytest.mark.slow
def test_a_resumed_pp2_dpo_run_repeats_the_uninterrupted_one(resume_runs, logged) -> None:
    """Two pipeline stages, each resuming its own rank file (``"torchrun" --nproc-per-node 2``)."""
    _resume_case("dpo", 2, resume_runs, logged)


def test_a_checkpoint_of_another_recipe_is_refused(
    write_jsonl, preference_pairs, tiny_model_dir, tmp_path, no_process_group_after
) -> None:
    """A DPO run resuming what an SFT (or any other recipe's) run saved would continue another objective's optimizer
    state: refused by name, before any process group."""
    from swiftcore_train import TrainConfig, run_training

    from swiftcore._plugins import load_plugins
    from swiftcore.api import SwiftcoreError

    checkpoint = tmp_path / "out" / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 2, "log_history": []}))
    args = {"model_spec": {"name": "qwen3_5"}, "swiftcore_args": {"recipe": "sft.megatron", "task": "causal_lm"}}
    (checkpoint / "swiftcore_args.json").write_text(json.dumps(args))
    cfg = TrainConfig(
        model=str(tiny_model_dir("qwen3_5")),
        dataset=(str(write_jsonl(tmp_path / "pairs.jsonl", preference_pairs)),),
        output_dir=str(tmp_path / "out"),
        engine="megatron",
        recipe="dpo",
        tuner="full",
        max_steps=4,
        resume_from_checkpoint="latest",
    )
    with pytest.raises(SwiftcoreError, match=re.escape("was saved by --recipe sft, this run is --recipe dpo")):
        run_training(cfg, load_plugins(env={}))
