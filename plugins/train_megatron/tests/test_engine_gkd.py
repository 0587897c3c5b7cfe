"""``swiftcore train --engine megatron --recipe gkd`` (the ``gkd.megatron`` recipe) against the ``gkd`` recipe on the
transformers engine (TRL's DistillationTrainer).

- Loss parity on a fixed batch (4 prompts of 5 tokens, completions of 1 to 6 tokens, ``--gkd-beta 0.5``,
  ``--rollout-temperature 0.7``, the seed-1 tiny model as the teacher): the first 3 step losses and gradient norms of
  full-weight training in fp32 equal those of the ``gkd`` recipe's trainer (``SwiftGKDTrainer.compute_loss``: TRL's
  chunked divergence from hidden states, the same AdamW step) to 1e-5, at TP1 and TP2 (real processes on gloo, TP2
  a torchrun world of 2; at TP2 the student's logits are gathered over the two vocabulary shards), for Qwen3.5 and
  OLMoE (MoE; at TP2 under sequence parallelism; no router loss on either engine). The batch is
  fixed, so no sampling enters the comparison (TRL 1.16's DistillationTrainer is always on-policy: it has no ``lmbda``).
- Mutations fail it: the same batch's first loss with ``--gkd-beta`` 0.4, or with temperature 1.0 instead of 0.7,
  differs from the reference by far more than the tolerance.
- Learning signal: 16 steps of GKD on this engine (rollouts from the transformers backend synced to the student before
  each step) lower the student's held-out JSD(0.5) to the teacher (other prompts, continued by the untrained
  student) below 0.8 of its start, as the ``gkd`` recipe's own test measures on the transformers engine.
- End to end at TP2: a run on 2 torchrun ranks logs the same completion lengths, losses and gradient norms as one at
  TP1, 3 steps.
- End to end with 2 data-parallel replicas (2 torchrun ranks at --tp 1, 2 prompts each a step): the same completion
  lengths, losses and gradient norms as one replica with the 4 prompts a step, 3 steps (each replica's divergence
  divided by the round's completion tokens, the gradients summed over the replicas).
- Refusals, before any process group exists: --pp, --ep, --rollout-engine vllm, --rollout-server,
  --gradient-accumulation-steps, a world that is no multiple of --tp, a family with multi-token-prediction layers.

What the selected tests need of this engine runs in one process per TP size (conftest's ``CliRuns``): the TP1
``swiftcore train`` runs and parity script in one process, the TP2 and data-parallel ones in one torchrun world of 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

# make test (CI) leaves this module to make test-all: megatron GKD parity, replicas and resume; megatron GRPO's (the
# shared RL run) stay in make test (test_engine_grpo.py) (docs/testing.md, "Two tiers").
pytestmark = pytest.mark.extended

STARTS_RANKS = True  # torchrun worlds (the repository conftest's rank lock)
STEPS = 3
LR = 1e-4
BETA = 0.5
TEMPERATURE = 0.7
#: The fixed batch's completion lengths and prompt length.
LENGTHS = (3, 6, 1, 4)
PROMPT = 5

#: One rank's side of the parity check: the GKD loop of this engine, three optimiser steps on the fixed batch, and the
#: first step's loss under mutated options (computed first, without gradient, from the initial weights).
MEGATRON_STEPS = """
import dataclasses, json, sys, torch
from pathlib import Path
from swiftcore_megatron import init_model_parallel, read_hf_config, resolve_bridge
from swiftcore_recipe_rl import GKDOptions
from swiftcore_train import TrainConfig
import swiftcore.api
from swiftcore.api.models import resolve_model_spec
from swiftcore_train_megatron.engine import load_sharded_model
from swiftcore_train_megatron.gkd import GKDLoop, completion_logits, gkd_loss, load_teacher, teacher_logits
from swiftcore_train_megatron.layout import ParallelLayout, world_size
from swiftcore_train_megatron.recipe import _schedule_and_optimizer

model_dir, teacher_dir, batch_file, out_file, beta, temperature, lr, steps = sys.argv[1:9]
tp = world_size()
plugins = swiftcore.api.load_plugins(env={})
bridge_spec, bridge = resolve_bridge(read_hf_config(Path(model_dir)), plugins)
cfg = TrainConfig(model=model_dir, dataset=("unused",), output_dir=str(Path(out_file).parent), tuner="full",
                  learning_rate=float(lr), lr_scheduler="constant", batch_size=4, max_steps=int(steps), seed=0)
options = GKDOptions(teacher_model=teacher_dir, gkd_beta=float(beta), max_completion_length=6,
                     rollout_temperature=float(temperature))
init_model_parallel(tp, 1, seed=0)
model = load_sharded_model(bridge, model_dir, tp=tp, ep=1)
layout = ParallelLayout(tp=tp)
schedule, optimizer, scheduler = _schedule_and_optimizer(cfg, Path(cfg.output_dir), model, 4, layout, tp)
loop = GKDLoop(cfg=cfg, output_dir=Path(cfg.output_dir), model=model, optimizer=optimizer, scheduler=scheduler,
               schedule=schedule, train_samples=[], val_samples=[], pad_token_id=0, bridge=bridge,
               bridge_name=bridge_spec.name, layout=layout, extras={}, options=options)
loop.attach_teacher(load_teacher(resolve_model_spec(teacher_dir, plugins), teacher_dir, plugins))
batch = torch.load(batch_file)
model.train()
mutants = {}
with torch.no_grad():
    student, teacher = completion_logits(model, batch), teacher_logits(loop.teacher, batch)
    for name, change in {"beta 0.4": {"gkd_beta": 0.4}, "temperature 1.0": {"rollout_temperature": 1.0}}.items():
        mutant = dataclasses.replace(options, **change)
        mutants[name] = float(gkd_loss(student, teacher, batch["completion_mask"], mutant))
got = [loop.learn(batch)[:2] for _ in range(int(steps))]
if torch.distributed.get_rank() == 0:
    Path(out_file).write_text(json.dumps({"steps": got, "mutants": mutants}))
"""


@pytest.fixture(scope="module")
def tiny(tiny_model_dir) -> Path:
    return tiny_model_dir("qwen3_5")


@pytest.fixture(scope="module")
def teacher_of(tmp_path_factory):
    """``teacher_of(family)``: a second tiny random checkpoint of the family (seed 1): the student's tokenizer and
    vocabulary, other weights (the ``gkd`` recipe's tests' teacher), made once."""
    from swiftcore_tiny import make_tiny

    from swiftcore._plugins import load_plugins

    made: dict[str, Path] = {}

    def make(family: str) -> Path:
        if family not in made:
            spec = load_plugins(env={}).registry.get("model", family)
            made[family] = make_tiny(spec, tmp_path_factory.mktemp("teacher") / family, seed=1)
        return made[family]

    return make


@pytest.fixture(scope="module")
def teacher(teacher_of) -> Path:
    return teacher_of("qwen3_5")


@pytest.fixture(scope="module")
def fixed_batch(tmp_path_factory) -> Path:
    """The fixed completions as TRL's distillation reads them (prompts of one length: no left padding)."""
    import torch

    gen = torch.Generator().manual_seed(3)
    rows, width = len(LENGTHS), max(LENGTHS)
    prompts = torch.randint(10, 200, (rows, PROMPT), generator=gen)
    completion_mask = (torch.arange(width)[None, :] < torch.tensor(LENGTHS)[:, None]).long()
    completion_ids = torch.randint(10, 200, (rows, width), generator=gen) * completion_mask
    batch = {
        "prompt_ids": prompts,
        "prompt_mask": torch.ones_like(prompts),
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "num_items_in_batch": completion_mask.sum(),
    }
    path = tmp_path_factory.mktemp("batch") / "batch.pt"
    torch.save(batch, path)
    return path


@pytest.fixture(scope="module")
def transformers_steps(tiny_model_dir, teacher_of, fixed_batch, tmp_path_factory):
    """``transformers_steps(family)``: the ``gkd`` recipe's trainer (TRL's DistillationTrainer, full weights, fp32)
    on the family's tiny student and teacher, 3 steps of its own loss on the batch; the loss and gradient norm of
    each step (made once a family)."""
    made: dict[str, list] = {}

    def get(family: str) -> list:
        if family not in made:
            out = tmp_path_factory.mktemp("transformers") / family
            made[family] = _transformers_steps(tiny_model_dir(family), teacher_of(family), fixed_batch, out)
        return made[family]

    return get


def _transformers_steps(tiny: Path, teacher: Path, fixed_batch: Path, out: Path) -> list:
    """The transformers engine's 3 steps of :func:`transformers_steps`."""
    import torch
    from datasets import Dataset
    from swiftcore_recipe_rl import GKDOptions, gkd_config, trainer_class
    from swiftcore_train import TrainConfig

    import swiftcore.api
    from swiftcore.api.models import load_model, load_tokenizer, resolve_model_spec

    plugins = swiftcore.api.load_plugins(env={})
    tokenizer = load_tokenizer(str(tiny))
    tokenizer.padding_side = "left"
    cfg = TrainConfig(
        model=str(tiny), dataset=("unused",), output_dir=str(out), tuner="full", learning_rate=LR,
        lr_scheduler="constant", batch_size=4, max_steps=STEPS, seed=0,
    )  # fmt: skip
    options = GKDOptions(teacher_model=str(teacher), gkd_beta=BETA, max_completion_length=6,
                         rollout_temperature=TEMPERATURE)  # fmt: skip

    def load(path: Path):
        return load_model(resolve_model_spec(str(path), plugins), str(path), plugins, torch_dtype="float32")

    torch.manual_seed(0)
    trainer = trainer_class("gkd")(
        model=load(tiny), teacher_model=load(teacher), args=gkd_config(cfg, options, out),
        train_dataset=Dataset.from_list([{"prompt": "p"}] * 4), processing_class=tokenizer,
    )  # fmt: skip
    model = trainer.model
    optimizer = trainer.create_optimizer()
    batch = torch.load(fixed_batch)
    model.train()
    got = []
    for _ in range(STEPS):
        loss = trainer.compute_loss(model, batch)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        got.append((float(loss.detach()), float(norm)))
    return got


def _plan_megatron_steps(cli_runs, model_dir: Path, teacher: Path, batch_file: Path, out: Path, tp: int) -> Path:
    """Plan this engine's GKD loop on ``tp`` ranks, 3 steps on the batch (:data:`MEGATRON_STEPS`, key ``("parity",
    model_dir.name, tp)``, in the world of this module's runs of that size); its result file, ``{"steps": [(loss,
    grad norm)...], "mutants": {name: first loss}}``."""
    out.mkdir(parents=True, exist_ok=True)
    script = out / "steps.py"
    script.write_text(MEGATRON_STEPS)
    result = out / "steps.json"
    argv = [model_dir, teacher, batch_file, result, BETA, TEMPERATURE, LR, STEPS]
    cli_runs.plan_script(("parity", model_dir.name, tp), script, argv, out, ranks=tp, group="gkd")
    return result


PARITY_TEST = "test_the_first_losses_equal_the_transformers_engine"


@pytest.fixture(scope="module")
def planned(cli_runs, selected_params, tiny, tiny_model_dir, request, tmp_path_factory) -> dict[tuple, Path]:
    """Plans, with conftest's ``CliRuns``, what the selected tests ask for: the ``swiftcore train`` runs of
    :data:`CLI_RUNS` and the parity script of each selected TP size; those of one size run together (the TP1 ones in
    one process, the TP2 ones in a torchrun world of 2) when the first is asked for. ``{(family, tp): parity result
    file}``."""
    root = tmp_path_factory.mktemp("runs")
    for test, _ in selected_params:
        for key, (steps, lr, tp, *rest) in CLI_RUNS.get(test, {}).items():
            dp = rest[0] if rest else 1
            args = _gkd_args(tiny, request.getfixturevalue("teacher"), root / key, steps=steps, lr=lr, tp=tp,
                             replicas=dp)  # fmt: skip
            args += [a.replace("{runs}", str(root)) for a in (rest[1] if len(rest) > 1 else ())]
            cli_runs.plan(key, args, root / key / "out", ranks=tp * dp, group="gkd")
    cases = sorted({(p["family"], p["tp"]) for test, p in selected_params if test == PARITY_TEST})
    batch = request.getfixturevalue("fixed_batch") if cases else None
    teacher_of = request.getfixturevalue("teacher_of") if cases else None
    return {
        (f, tp): _plan_megatron_steps(cli_runs, tiny_model_dir(f), teacher_of(f), batch, root / f"{f}-tp{tp}", tp)
        for f, tp in cases
    }


@pytest.fixture(scope="module")
def megatron_steps(planned, cli_runs):
    """``megatron_steps(family, tp) -> {"steps", "mutants"}``: the parity script's result of the family at that TP
    size (run now, with the rest of its world, if not yet made)."""

    def get(family: str, tp: int) -> dict:
        cli_runs.get(("parity", family, tp))
        return json.loads(planned[family, tp].read_text())

    return get


@pytest.mark.slow
@pytest.mark.parametrize(
    ("family", "tp"),
    [("qwen3_5", 1), ("qwen3_5", 2), ("olmoe", 1), ("olmoe", 2)],
    ids=["tp1", "tp2", "olmoe-tp1", "olmoe-tp2"],
)
def test_the_first_losses_equal_the_transformers_engine(family, tp, transformers_steps, megatron_steps):
    """Also the mutations: a wrong ``--gkd-beta`` or temperature gives another first loss (the check can fail).

    OLMoE (MoE, at TP2 under sequence parallelism): TRL's DistillationTrainer adds no router load-balancing loss, nor
    does this engine (megatron's own router loss is off in the bridges)."""
    expected = transformers_steps(family)
    ran = megatron_steps(family, tp)
    got = ran["steps"]
    print(f"gkd {family} tp{tp}: transformers {expected}\n megatron {got}\n mutants {ran['mutants']}")
    assert len(got) == STEPS
    for step, ((loss, norm), (want_loss, want_norm)) in enumerate(zip(got, expected, strict=True), start=1):
        assert loss == pytest.approx(want_loss, rel=1e-5, abs=1e-5), (step, got, expected)
        assert norm == pytest.approx(want_norm, rel=1e-5, abs=1e-5), (step, got, expected)
    assert abs(expected[-1][0] - expected[0][0]) > 1e-4 and expected[-1][1] > 0, "the losses and gradients must move"
    for name, loss in ran["mutants"].items():
        assert abs(loss - expected[0][0]) > 1e-3, (name, loss, expected[0][0])


# ---------------------------------------------------------------------------------------------- learning signal


def _divergence(student_logits, teacher_logits, beta: float) -> float:
    """The mean per-token generalised JSD of two ``(B, C, V)`` logits (float64; TRL's definition, the ``gkd``
    recipe's test's reference)."""
    import torch

    log_ps = torch.log_softmax(student_logits.double(), -1)
    log_pt = torch.log_softmax(teacher_logits.double(), -1)
    log_m = torch.logsumexp(torch.stack([log_ps + torch.log(torch.tensor(1 - beta)),
                                         log_pt + torch.log(torch.tensor(beta))]), 0)  # fmt: skip
    teacher_side = (log_pt.exp() * (log_pt - log_m)).sum(-1)
    student_side = (log_ps.exp() * (log_ps - log_m)).sum(-1)
    return float((beta * teacher_side + (1 - beta) * student_side).mean())


def _gkd_args(
    model: Path, teacher: Path, work: Path, *, steps: int, lr: float, tp: int = 1, replicas: int = 1
) -> list[str]:
    """What follows ``swiftcore`` for ``swiftcore train --engine megatron --recipe gkd`` (16 prompts, 4 a step,
    completions of up to 8 tokens from the transformers backend, ``--gkd-beta 0.5``, full weights, constant ``lr``,
    seed 0) at ``--tp tp`` (on a world of ``tp x replicas`` ranks; ``--batch-size`` is per replica:
    ``4 / replicas``), writing ``work/out``."""
    work.mkdir(parents=True, exist_ok=True)
    data = work / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Tell me about item {i}."}) + "\n" for i in range(16)))
    return ["train", "--tp", str(tp), "--engine", "megatron", "--recipe", "gkd", "--model", str(model),
            "--teacher-model", str(teacher), "--gkd-beta", "0.5", "--dataset", str(data),
            "--output-dir", str(work / "out"), "--tuner", "full", "--learning-rate", str(lr),
            "--lr-scheduler", "constant", "--max-steps", str(steps), "--batch-size", str(4 // replicas),
            "--logging-steps", "1",
            "--save-steps", "1000", "--seed", "0", "--no-plot", "--max-completion-length", "8",
            "--rollout-engine", "transformers"]  # fmt: skip


#: The 3-step TP1 run the TP2, data-parallel and resumed runs are compared with (it also saves checkpoint-2).
TP1 = (3, 1e-4, 1, 1, ("--save-steps", "2"))
#: The ``swiftcore train`` runs each test asks for: key -> (steps, learning rate, tp[, data-parallel replicas[, more
#: arguments ("{runs}" is the runs' root)]]).
CLI_RUNS = {
    "test_gkd_lowers_the_held_out_divergence_to_the_teacher": {"learn": (16, 5e-3, 1)},
    "test_a_tp2_run_logs_the_steps_of_a_tp1_run": {"tp1": TP1, "tp2": (3, 1e-4, 2)},
    "test_two_data_parallel_replicas_log_the_steps_of_one": {"tp1": TP1, "dp2": (3, 1e-4, 1, 2)},
    "test_a_resumed_run_repeats_the_uninterrupted_ones_last_step": {
        "tp1": TP1, "resumed": (3, 1e-4, 1, 1, ("--resume-from-checkpoint", "{runs}/tp1/out/checkpoint-2")),
    },
}


@pytest.fixture(scope="module")
def gkd_runs(planned, cli_runs, logged):
    """``gkd_runs(key) -> (output directory, logged step records)``: this module's ``swiftcore train`` runs
    (:data:`CLI_RUNS`, planned by :func:`planned`: the TP1 runs in one process, the TP2 run in a torchrun world of 2,
    each with the parity script of its size) made when the first is asked for."""

    def get(key: str) -> tuple[Path, list[dict]]:
        out = cli_runs.get(key)
        return out, [record for record in logged(out) if "loss" in record]

    return get


@pytest.mark.slow
def test_gkd_lowers_the_held_out_divergence_to_the_teacher(tiny, teacher, gkd_runs):
    """16 steps at lr 5e-3, 4 prompts a step, completions of up to 8 tokens from the transformers backend (synced to
    the student's weights before each step after the first)."""
    import torch

    import swiftcore.api
    from swiftcore.api.models import load_model, resolve_model_spec

    plugins = swiftcore.api.load_plugins(env={})

    def load(path: Path):
        return load_model(resolve_model_spec(str(path), plugins), str(path), plugins).eval()

    def logits(model, ids):
        return model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[:, 5:-1]

    # Held-out sequences: other prompts, continued by the untrained student (fixed seed).
    student, reference = load(tiny), load(teacher)
    torch.manual_seed(1)
    held_out = torch.randint(10, 200, (8, 6))
    with torch.no_grad():
        ids = student.generate(held_out, attention_mask=torch.ones_like(held_out), do_sample=True, max_new_tokens=8,
                               min_new_tokens=8, pad_token_id=0)  # fmt: skip
        teacher_logits = logits(reference, ids)
        before = _divergence(logits(student, ids), teacher_logits, 0.5)

    steps = 16
    out, logs = gkd_runs("learn")
    trained = load(out / f"checkpoint-{steps}")
    with torch.no_grad():
        after = _divergence(logits(trained, ids), teacher_logits, 0.5)
    synced = [r["sync_bytes"] for r in logs]
    print(f"gkd.megatron: held-out JSD(0.5) to the teacher {before:.4f} -> {after:.4f} in {steps} steps; "
          f"train loss {[round(r['loss'], 4) for r in logs]}")  # fmt: skip
    assert len(logs) == steps and synced[0] == 0 and all(b > 0 for b in synced[1:]), logs
    assert after < 0.8 * before, (before, after)
    assert json.loads((out / "args.json").read_text())["gkd"]["teacher_model"] == str(teacher)


@pytest.mark.slow
def test_a_tp2_run_logs_the_steps_of_a_tp1_run(gkd_runs):
    """End to end at TP2 (2 torchrun ranks): the same completions (sampled under --seed and the step, from the
    weights the sync gathered over both ranks), losses and gradient norms as at TP1, 3 steps at lr 1e-4."""
    _, one = gkd_runs("tp1")
    _, two = gkd_runs("tp2")
    print(f"tp1 {[(r['loss'], r['grad_norm']) for r in one]}\ntp2 {[(r['loss'], r['grad_norm']) for r in two]}")
    assert len(one) == len(two) == 3
    for a, b in zip(one, two, strict=True):
        assert a["completions/mean_length"] == b["completions/mean_length"], (a, b)
        for key in ("loss", "grad_norm"):
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-5), (key, a, b)
    assert one[1]["sync_bytes"] == two[1]["sync_bytes"] > 0


@pytest.mark.slow
def test_a_resumed_run_repeats_the_uninterrupted_ones_last_step(gkd_runs, resumed_weights_gap):
    """``--resume-from-checkpoint`` the 3-step TP1 run's checkpoint-2: step 3's completions (sampled under --seed and
    the step by an engine synced to the checkpoint's weights), loss, gradient norm and the weights after it (AdamW's
    state restored) are the uninterrupted run's."""
    whole_dir, whole = gkd_runs("tp1")
    resumed_dir, resumed = gkd_runs("resumed")
    print(f"uninterrupted step 3 {whole[-1]}\nresumed {resumed}")
    assert [r["step"] for r in whole] == [1, 2, 3] and [r["step"] for r in resumed] == [3], resumed
    a, b = whole[-1], resumed[-1]
    assert a["completions/mean_length"] == b["completions/mean_length"] and a["sync_bytes"] == b["sync_bytes"] > 0
    for key in ("loss", "grad_norm"):
        assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-5), (key, a, b)
    assert a["loss"] != whole[-2]["loss"]  # step 3 is no copy of step 2
    gap, moved = resumed_weights_gap(whole_dir, resumed_dir, 3)
    assert gap < 1e-6 < moved, (gap, moved)


@pytest.mark.slow
def test_two_data_parallel_replicas_log_the_steps_of_one(gkd_runs):
    """End to end with 2 data-parallel replicas (2 torchrun ranks at --tp 1, --batch-size 2 each): rank 0 samples the
    round of both replicas' prompts (the one-replica run's 4 prompts at --batch-size 4), each replica's divergence is
    summed over its completions' tokens and divided by the round's, and the gradients are summed over the replicas:
    the same completion lengths, losses and gradient norms as one replica, 3 steps at lr 1e-4."""
    _, one = gkd_runs("tp1")
    _, two = gkd_runs("dp2")
    print(f"1 replica {[(r['loss'], r['grad_norm']) for r in one]}")
    print(f"2 replicas {[(r['loss'], r['grad_norm']) for r in two]}")
    assert len(one) == len(two) == 3
    for a, b in zip(one, two, strict=True):
        assert a["completions/mean_length"] == b["completions/mean_length"], (a, b)
        for key in ("loss", "grad_norm"):
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-5), (key, a, b)
    assert abs(one[-1]["loss"] - one[0]["loss"]) > 1e-4 and all(r["grad_norm"] > 0 for r in one), one
    assert one[1]["sync_bytes"] == two[1]["sync_bytes"] > 0


# ---------------------------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("family", "options", "expected"),
    [
        ("qwen3_5", {"recipe_options": {"pp": 2}}, "--pp 2 / --vpp 1: GKD does not run through pipeline stages"),
        ("qwen3_5", {"recipe_options": {"ep": 2}}, "--ep 2: GKD trains dense families only so far"),
        ("qwen3_5", {"recipe_options": {"rollout_engine": "vllm"}}, "--rollout-engine vllm: this engine generates"),
        ("qwen3_5", {"recipe_options": {"rollout_server": "http://127.0.0.1:9"}}, "--rollout-server: this engine"),
        ("qwen3_5", {"gradient_accumulation_steps": 2}, "--gradient-accumulation-steps: GKD on this engine runs"),
        (
            "qwen3_5",
            {"world": 3, "recipe_options": {"tp": 2}},
            "world size 3 (processes launched) is not a multiple of --tp 2",
        ),
        ("glm5_with_mtp", {}, "builds multi-token-prediction (MTP) layers"),
    ],
    ids=["pp", "ep", "vllm", "rollout-server", "accumulation", "world", "mtp"],
)
def test_what_gkd_megatron_does_not_do_is_refused(
    family, options, expected, tiny_model_dir, tmp_path, monkeypatch, no_process_group_after, request
):
    """Each refusal names what would work (the message's tail); the model is its own teacher (a matching
    vocabulary), so only the refused option stops the run."""
    import re

    from swiftcore_train import TrainConfig, run_training

    from swiftcore._plugins import load_plugins
    from swiftcore.api import SwiftcoreError

    if world := options.pop("world", None):
        monkeypatch.setenv("WORLD_SIZE", str(world))
    data = tmp_path / "prompts.jsonl"
    data.write_text(json.dumps({"prompt": "hi"}) + "\n")
    model = request.getfixturevalue(family) if family == "glm5_with_mtp" else tiny_model_dir(family)
    recipe_options = {"teacher_model": str(model), **options.pop("recipe_options", {})}
    cfg = TrainConfig(
        model=str(model), dataset=(str(data),), output_dir=str(tmp_path / "out"), engine="megatron", recipe="gkd",
        max_steps=1, recipe_options=recipe_options, **{"tuner": "full", **options},
    )  # fmt: skip
    with pytest.raises(SwiftcoreError, match=re.escape(expected)) as raised:
        run_training(cfg, load_plugins(env={}))
    assert re.search(r"use |drop |launch with|train a dense family", str(raised.value)), str(raised.value)
    assert not (tmp_path / "out").exists(), "nothing is written before the checks pass"
