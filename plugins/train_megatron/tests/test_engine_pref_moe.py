"""``swiftcore train --engine megatron --recipe dpo`` and ``--recipe kto`` on a MoE family (the tiny OLMoE: 4 experts,
top-2, on every layer) against the same recipes on the transformers engine (TRL's DPOTrainer / KTOTrainer), on gloo.

- Loss parity: the first 3 step losses, TRL's ``aux_loss`` (the router load-balancing loss, which TRL adds to the
  loss times the checkpoint's ``router_aux_loss_coef``, 0.01 here), reward margins, log-probs (and for KTO its ``kl``)
  and gradient norms at EP1 and EP2 equal the transformers engine's on the same init, data order and optimiser, full
  weights, fp32, to 1e-5. The transformers engine's run has as many ranks as the megatron one (EP2: two
  data-parallel ranks, each with its batch): TRL's aux loss is each rank's own batch's, not the whole step's.
- The aux term reaches the loss: DPO's step 1 (policy = reference) is log 2 plus 0.01 times about 2.0, not log 2.
- TP2 (one data-parallel rank; megatron trains MoE under TP with sequence parallelism, so each rank routes half of
  each sequence and the aux loss gathers the routers' logits) equals the transformers engine's one-rank run the same.
- Refusals, before any process group exists: MoE under --pp (--cp is refused for every family), a
  multi-token-prediction bridge.

The transformers engine's runs keep the default ``--loss-chunk-size``: the preference recipes leave TRL's fused head
in place when TRL adds the load-balancing loss (its rule: a config with ``output_router_logits``, whatever its value,
and a coefficient); the chunked head took over when the value was false, returned no ``aux_loss``, and TRL's step
failed (``float * None``).

The runs are made in as few processes as they allow (conftest's ``CliRuns``): both engines' runs on one rank in one
process, both engines' EP2 runs in one torchrun world of 2 ranks, each run through the CLI's own ``main``; measured,
the module's 8 runs took 88 s against 127 s with each engine in processes of its own (the same losses to the last
digit).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

# make test (CI) leaves this module to make test-all: megatron DPO/KTO on MoE families; megatron DPO parity stays in
# make test (test_engine_dpo.py) (docs/testing.md, "Two tiers").
pytestmark = pytest.mark.extended

STARTS_RANKS = True  # torchrun worlds (the repository conftest's rank lock)
STEPS = 3
FAMILY = "olmoe"

DPO = ("--tuner", "full", "--max-steps", str(STEPS), "--learning-rate", "5e-4", "--save-steps", "100",
       "--split-ratio", "0")  # fmt: skip
KTO = (*DPO, "--beta", "0.2", "--undesirable-weight", "1.5")
#: Rows for KTO (a pair gives one desirable and one undesirable row): 9 rows in batches of 3.
KTO_ROWS = [
    {"prompt": "say apple", "completion": "apple apple", "label": True},
    {"prompt": "name a colour", "completion": "a loud noise, very loud", "label": False},
    {"prompt": "count to three", "chosen": "one two three", "rejected": "three"},
    {"prompt": "greet me", "completion": "hello there, friend", "label": True},
    {"prompt": "say a number", "completion": "a cat", "label": False},
    {"prompt": "say yes", "completion": "yes", "label": True},
    {"prompt": "spell cat", "completion": "dog", "label": False},
    {"prompt": "what is up", "completion": "the sky", "label": True},
]
METRICS = {
    "dpo": ("loss", "grad_norm", "aux_loss", "rewards/margins", "logps/chosen", "logps/rejected"),
    "kto": ("loss", "grad_norm", "aux_loss", "kl", "rewards/chosen", "rewards/rejected", "rewards/margins",
            "logps/chosen", "logps/rejected"),
}  # fmt: skip


@pytest.fixture(scope="module")
def moved_olmoe(tiny_model_dir, tmp_path_factory) -> Path:
    """The tiny OLMoE with every weight moved by noise: KTO's ``--ref-model`` (with the policy's own weights as the
    reference, z_ref stays clamped at 0 on these rows)."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    out = tmp_path_factory.mktemp("reference") / "olmoe_moved"
    shutil.copytree(tiny_model_dir(FAMILY), out)
    gen = torch.Generator().manual_seed(1)
    weights = load_file(out / "model.safetensors")
    tensors = {k: v + 0.02 * torch.randn(v.shape, generator=gen) for k, v in weights.items()}
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def _needs(test: str, params: dict) -> list[tuple]:
    """The runs a test of this module asks for: ``(engine, recipe, ep, tp)`` (the transformers engine's at tp 1, with
    as many ranks as the megatron run has data-parallel ranks: ``ep``)."""
    if test == "test_the_first_losses_equal_the_transformers_engine":
        ep, tp = params["ep"], params["tp"]
        return [("transformers", params["recipe"], ep, 1), ("megatron", params["recipe"], ep, tp)]
    return []


@pytest.fixture(scope="module")
def runs(request, cli_runs, selected_params, recipe_args, tiny_model_dir, write_jsonl, preference_pairs,
         tmp_path_factory):  # fmt: skip
    """``runs(key) -> output directory``: the module's runs (see :func:`_needs`), those the selected tests need
    planned together (conftest's ``CliRuns``: by number of ranks, both engines in one process or world) and made when
    the first is asked for.

    EP2 is two data-parallel ranks of the dense layers: DPO's batch of 4 pairs a step is 2 on each rank, KTO's batch
    of 3 rows is each rank's (both engines deal the batches to the ranks as accelerate does). TP2 is one
    data-parallel rank (against the transformers engine's one-rank run); TP2 EP2 splits the experts over the two
    tensor-parallel ranks, still one data-parallel rank."""
    root = tmp_path_factory.mktemp("runs")
    model = tiny_model_dir(FAMILY)
    data = {
        "dpo": write_jsonl(root / "pairs.jsonl", preference_pairs),
        "kto": write_jsonl(root / "kto.jsonl", KTO_ROWS),
    }
    for key in sorted({key for test, params in selected_params for key in _needs(test, params)}):
        engine, recipe, ep, tp = key
        out = root / f"{engine}-{recipe}-ep{ep}-tp{tp}"
        flags = (*DPO, "--batch-size", str(4 // ep)) if recipe == "dpo" else (*KTO, "--batch-size", "3")
        if recipe == "kto":
            flags += ("--ref-model", str(request.getfixturevalue("moved_olmoe")))
        flags += ("--engine", "megatron", "--ep", str(ep), "--tp", str(tp)) if engine == "megatron" else ()
        cli_runs.plan(key, recipe_args(recipe, model, data[recipe], out, *flags), out, ranks=ep * tp, group="all")
    return cli_runs.get


@pytest.mark.slow
@pytest.mark.parametrize(
    ("recipe", "ep", "tp"),
    [(recipe, ep, tp) for recipe in ("dpo", "kto") for ep, tp in ((1, 1), (2, 1), (1, 2))],
    ids=[f"{recipe}-{layout}" for recipe in ("dpo", "kto") for layout in ("ep1", "ep2", "tp2")],
)
def test_the_first_losses_equal_the_transformers_engine(recipe, ep, tp, runs, logged):
    expected = {r["step"]: r for r in logged(runs(("transformers", recipe, ep, 1))) if "loss" in r}
    got = {r["step"]: r for r in logged(runs(("megatron", recipe, ep, tp))) if "loss" in r}
    assert sorted(got) == sorted(expected) == list(range(1, STEPS + 1))
    worst = 0.0
    for step, record in expected.items():
        for key in METRICS[recipe]:
            if key in record:
                assert got[step][key] == pytest.approx(record[key], rel=1e-5, abs=1e-5), (step, key)
                worst = max(worst, abs(got[step][key] - record[key]) / max(1.0, abs(record[key])))
    print(f"{recipe} ep{ep} tp{tp}: largest difference (relative above 1) over {STEPS} steps: {worst:.1e}")
    assert all("aux_loss" in expected[step] for step in expected), "TRL must add the load-balancing loss"
    assert all(1.9 < expected[step]["aux_loss"] < 2.2 for step in expected), expected
    assert abs(expected[STEPS]["loss"] - expected[1]["loss"]) > 0.1, "the losses must move"
    if recipe == "dpo":  # policy = reference at step 1: the DPO term is log 2, the rest is 0.01 * aux_loss
        assert expected[1]["loss"] == pytest.approx(math.log(2) + 0.01 * expected[1]["aux_loss"], abs=1e-6)
    else:
        assert all(expected[step]["kl"] > 0.1 for step in expected), "the KL estimate must reach the loss"


@pytest.mark.parametrize("recipe", ["dpo", "kto"])
@pytest.mark.parametrize(
    ("model", "options", "expected"),
    [
        (FAMILY, {"recipe_options": {"pp": 2}}, "--pp 2: bridge 'olmoe' builds MoE layers, whose router "
                                                "load-balancing loss"),
        ("glm5_with_mtp", {}, "builds multi-token-prediction (MTP) layers"),
    ],
    ids=["moe-pp2", "mtp"],
)  # fmt: skip
def test_what_preference_on_moe_does_not_do_is_refused(
    request, recipe, model, options, expected, write_jsonl, preference_pairs, tiny_model_dir, tmp_path,
    no_process_group_after,
):  # fmt: skip
    from swiftcore_train import TrainConfig, run_training

    from swiftcore._plugins import load_plugins
    from swiftcore.api import SwiftcoreError

    model_dir = request.getfixturevalue(model) if model == "glm5_with_mtp" else tiny_model_dir(model)
    rows = preference_pairs if recipe == "dpo" else KTO_ROWS
    cfg = TrainConfig(
        model=str(model_dir),
        dataset=(str(write_jsonl(tmp_path / "rows.jsonl", rows)),),
        output_dir=str(tmp_path / "out"),
        engine="megatron",
        recipe=recipe,
        max_steps=1,
        **{"tuner": "full", "batch_size": 4, **options},
    )
    with pytest.raises(SwiftcoreError, match=re.escape(expected)):
        run_training(cfg, load_plugins(env={}))
    assert not (tmp_path / "out").exists(), "nothing is written before the checks pass"
