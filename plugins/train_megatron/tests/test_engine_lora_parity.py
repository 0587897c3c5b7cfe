"""``--engine megatron --tuner lora`` against the transformers engine's LoRA (peft) on the same adapter init.

The transformers engine seeds torch with ``--seed``, loads the model and wraps it with peft; the initial adapter is
made here the same way (``apply_tuner``) and given to the megatron engine with ``--lora-init-adapter``. Both engines
then train 5 steps on the same data: every step's loss and gradient norm are equal to 1e-5 relative (fp32), for
Qwen3.5 (its default targets: every linear layer, the fused q/k/v, gate/up and gated-DeltaNet input projections
included, each HF layer with its own adapter) at TP1, TP2 and PP2, and for OLMoE (MoE; attention targets, as the
megatron engine leaves experts out of LoRA) at TP1, TP2 (under sequence parallelism, which MoE layers need at TP > 1)
and EP2.

The step-1 gradient norm depends on ``lora_A`` (the gradient of ``lora_B`` is ``A x`` times the output's), and the
later losses on the scaling ``alpha / r``: a different init or scaling fails the comparison (with the scaling
changed to ``alpha / (2 r)`` in ``_add_low_rank_update``, step 1's gradient norm is half the reference's and step 2's
loss differs by 1.6e-2 relative).

The runs the selected families need are made in as few processes as they allow (conftest's ``CliRuns``, each through
the CLI's own ``main``): both engines' runs on one rank in one process, the runs of two ranks in one torchrun world
of 2 ranks; a process start costs more than the few steps of the tiny models. The refused run joins the runs on one
rank (planned to fail: its failure, which comes on every rank before any step, does not stop the others).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

STARTS_RANKS = True  # torchrun worlds (the repository conftest's rank lock)
STEPS = 5
SEED = 7
LORA = ("--tuner", "lora", "--lora-rank", "4", "--lora-alpha", "8")


def _train_args(model: Path, dataset: Path, out: Path, extra: tuple = ()) -> list[str]:
    """What follows ``swiftcore`` to train ``STEPS`` LoRA steps (each step logged)."""
    return [
        "train",
        "--model", str(model),
        "--dataset", str(dataset),
        "--output-dir", str(out),
        *LORA,
        "--max-steps", str(STEPS), "--batch-size", "2", "--learning-rate", "2e-3",
        "--logging-steps", "1", "--save-steps", str(STEPS), "--seed", str(SEED), "--no-plot",
        *extra,
    ]  # fmt: skip


def _peft_init(model_dir: Path, out: Path, targets: tuple[str, ...]) -> Path:
    """The adapter the transformers engine starts from (``sft.py``: ``torch.manual_seed``, load, ``apply_tuner``)."""
    import torch
    from swiftcore_train import TrainConfig, apply_tuner

    from swiftcore._plugins import load_plugins
    from swiftcore.api.models import load_model, resolve_model_spec

    plugins = load_plugins(env={})
    spec = resolve_model_spec(str(model_dir), plugins)
    cfg = TrainConfig(model=str(model_dir), dataset=("unused.jsonl",), tuner="lora", lora_rank=4, lora_alpha=8,
                      target_modules=targets, seed=SEED)  # fmt: skip
    torch.manual_seed(SEED)
    apply_tuner(load_model(spec, str(model_dir), plugins, torch_dtype="float32"), spec, cfg).save_pretrained(out)
    return out


CASES = {
    # family: (--target-modules, megatron layouts as (ranks, flags))
    "qwen3_5": ((), {"tp1": (1, ()), "tp2": (2, ("--tp", "2")), "pp2": (2, ("--pp", "2"))}),
    # EP2: two data-parallel ranks of one sample each, the reference's batch of 2 (the last --batch-size wins)
    "olmoe": (
        ("q_proj", "k_proj", "v_proj", "o_proj"),
        # TP2: MoE layers train under sequence parallelism, and so does their attention's LoRA
        {"tp1": (1, ()), "tp2": (2, ("--tp", "2")), "ep2": (2, ("--ep", "2", "--batch-size", "1"))},
    ),
}


@pytest.fixture(scope="module")
def runs(cli_runs, selected_params, tiny_model_dir, dataset, tmp_path_factory):
    """``runs((family, layout)) -> output directory``: each selected family's transformers-engine run (``layout``
    ``"transformers"``) and megatron runs (its layouts in :data:`CASES`, from the same initial adapter), planned
    together (conftest's ``CliRuns``: by number of ranks, both engines in one process or world) and made when the
    first is asked for; with them, the refused run (:data:`REFUSED`) when its test is selected."""
    root = tmp_path_factory.mktemp("runs")
    if any(test == "test_an_adapter_of_another_rank_is_refused" for test, _ in selected_params):
        _plan_refused(cli_runs, tiny_model_dir("qwen3_5"), dataset, root / "refused")
    tested = "test_megatron_lora_equals_peft_lora_from_the_same_init"
    families = sorted({params["family"] for test, params in selected_params if test == tested})
    for family in families:
        targets, layouts = CASES[family]
        model = tiny_model_dir(family)
        target_flags = tuple(flag for target in targets for flag in ("--target-modules", target))
        out = root / f"{family}-transformers"
        cli_runs.plan((family, "transformers"), _train_args(model, dataset, out, target_flags), out, group="all")
        init = _peft_init(model, root / f"{family}-init", targets)
        for layout, (ranks, flags) in layouts.items():
            extra = ("--engine", "megatron", "--lora-init-adapter", str(init), *flags, *target_flags)
            out = root / f"{family}-{layout}"
            cli_runs.plan((family, layout), _train_args(model, dataset, out, extra), out, ranks=ranks, group="all")
    return cli_runs.get


def _steps(out: Path, logged) -> dict[int, dict]:
    """Each step's log record of the run that wrote ``out``."""
    return {r["step"]: r for r in logged(out) if "loss" in r}


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(CASES))
def test_megatron_lora_equals_peft_lora_from_the_same_init(family, runs, logged) -> None:
    _, layouts = CASES[family]
    reference = runs((family, "transformers"))
    expected = _steps(reference, logged)
    for layout in layouts:
        got = _steps(runs((family, layout)), logged)
        assert sorted(got) == sorted(expected) == list(range(1, STEPS + 1)), layout
        for key in ("loss", "grad_norm"):
            worst = max(abs(got[s][key] - expected[s][key]) / abs(expected[s][key]) for s in expected)
            assert worst < 1e-5, (layout, key, {s: (expected[s][key], got[s][key]) for s in expected})
        assert expected[STEPS]["loss"] < expected[1]["loss"], "the adapter learns, or equal losses prove little"
    adapter = json.loads((runs((family, "tp1")) / f"checkpoint-{STEPS}" / "adapter_config.json").read_text())
    peft_adapter = json.loads((reference / f"checkpoint-{STEPS}" / "adapter_config.json").read_text())
    assert sorted(adapter["target_modules"]) != [] and adapter["r"] == peft_adapter["r"] == 4


#: The :class:`CliRuns` key of the refused run (an adapter of another rank).
REFUSED = "refused"


def _plan_refused(cli_runs, model: Path, dataset: Path, work: Path) -> None:
    """Plan, to fail, ``swiftcore train --engine megatron`` with an initial adapter of ``r=8`` and ``--lora-rank 4``
    (the check reads the adapter's config, the same on every rank)."""
    init = _peft_init(model, work / "init", ())
    config = json.loads((init / "adapter_config.json").read_text())
    config["r"] = 8
    (init / "adapter_config.json").write_text(json.dumps(config))
    args = [
        "train", "--model", str(model), "--dataset", str(dataset), "--output-dir", str(work / "out"),
        "--engine", "megatron", *LORA, "--max-steps", "1", "--lora-init-adapter", str(init),
    ]  # fmt: skip
    cli_runs.plan(REFUSED, args, work / "out", group="all", fails=True)


@pytest.mark.slow
def test_an_adapter_of_another_rank_is_refused(runs, cli_runs) -> None:
    """``--lora-init-adapter`` with another ``r`` than ``--lora-rank``: refused, naming both."""
    failure = cli_runs.failure(REFUSED)  # asserts that the run failed (a nonzero exit code)
    assert failure.startswith("exit code "), failure[-2000:]
    assert "r=8" in failure and "--lora-rank 4" in failure, failure[-2000:]


@pytest.mark.parametrize(
    ("recipe", "tuner", "trained", "expected"),
    [
        ("sft", "full", False, "starts a LoRA run; add --tuner lora"),
        ("dpo", "lora", True, "a trained adapter (lora_B not zero) would move the reference of dpo"),
        ("kto", "lora", True, "a trained adapter (lora_B not zero) would move the reference of kto"),
    ],
    ids=["full", "dpo-trained", "kto-trained"],
)
def test_what_an_init_adapter_cannot_do_is_refused_first(recipe, tuner, trained, expected, tiny_model_dir, tmp_path):
    """Refused before any process group: ``--lora-init-adapter`` without LoRA, and a trained adapter as the start of
    DPO or KTO, whose reference is the model before the adapter learns."""
    import torch
    import torch.distributed as dist
    from safetensors.torch import save_file
    from swiftcore_train import TrainConfig, run_training

    from swiftcore._plugins import load_plugins
    from swiftcore.api import SwiftcoreError

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 4, "lora_alpha": 8}))
    module = "base_model.model.model.language_model.layers.3.self_attn.q_proj"
    tensors = {f"{module}.lora_A.weight": torch.ones(4, 64), f"{module}.lora_B.weight": torch.ones(8, 4) * trained}
    save_file(tensors, str(adapter / "adapter_model.safetensors"))
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"prompt": "say yes", "chosen": "yes", "rejected": "no"}) + "\n")
    cfg = TrainConfig(model=str(tiny_model_dir("qwen3_5")), dataset=(str(rows),), output_dir=str(tmp_path / "out"),
                      engine="megatron", recipe=recipe, tuner=tuner, lora_rank=4, lora_alpha=8, max_steps=1,
                      recipe_options={"lora_init_adapter": str(adapter)})  # fmt: skip
    before = dist.is_initialized()
    with pytest.raises(SwiftcoreError, match=re.escape(expected)):
        run_training(cfg, load_plugins(env={}))
    assert before or not dist.is_initialized(), "a process group was created before the error"
    assert not (tmp_path / "out").exists()
