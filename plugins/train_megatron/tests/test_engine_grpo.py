"""``swiftcore train --engine megatron --recipe grpo`` (the ``grpo.megatron`` recipe) against the ``grpo`` recipe on the
transformers engine (TRL's GRPOTrainer).

- Loss parity on a fixed batch of rollouts (2 prompts x groups of 4, completions of 1 to 6 tokens, fixed rewards and
  so fixed advantages, rollout temperature 0.7): the first 3 step losses and gradient norms of full-weight training in
  fp32 equal those of the ``grpo`` recipe's trainer (``SwiftGRPOTrainer._compute_loss``, the policy's own log-probs,
  the same AdamW step) to 1e-5, at TP1 and TP2 (real processes on gloo, TP2 a torchrun world of 2), for the ``dapo``
  (default) and ``grpo`` loss types. The batch's old log-probs are each engine's own of the initial weights (as with
  ``--num-iterations 3``), so steps 2 and 3 are off-policy: their losses test the log-probs (temperature, the
  completion positions) through the ratio and its clipping, and the gradient norms the backward pass and its
  reduction over the TP ranks.
- The same on OLMoE (MoE) at TP1 and TP2 (``dapo``): the loss carries TRL's ``router_aux_loss_coef * aux_loss``
  (``aux_loss`` equal to TRL's at every step), and the synced tensors are the transformers model's fused experts.
  End to end, a 2-step OLMoE run logs ``aux_loss`` and syncs the whole model under the engine's names.
- The advantages are TRL's: ``group_advantages`` gives the group-normalised rewards of TRL's formula on fixed rewards
  (an unscorable completion gets 0).
- The weight sync's tensors after those steps (``hf_tensors``: the bridge's rules run backwards, gathered over the TP
  ranks) carry the transformers model's own parameter names and equal its weights after the same steps.
- End to end at TP2: a run on 2 torchrun ranks logs the same rewards (same rollouts, sampled under --seed and the step
  from the synced weights), losses and gradient norms as one at TP1, 3 steps.
- End to end with 2 data-parallel replicas (2 torchrun ranks at --tp 1, 1 prompt each a step): the same rewards,
  losses, gradient norms and clip ratios as one replica with both prompts a step, 3 steps (each replica learns on its
  prompt's completions with TRL's normalisation over the round, the gradients summed over the replicas).
- Learning signal: the vowel task (the recipe_rl tests' toy task: a reply that starts with a vowel earns 1), 6 steps of
  GRPO on this engine with rollouts from the transformers backend synced after each step: the rollouts' reward rises,
  and the mean reward of the exported checkpoint on 8 held-out prompts (8 samples each, by the transformers backend)
  rises from the base model's by >= 0.4 and reaches >= 0.7.
- ``--grpo-beta``: the parity above with TRL's KL term to the reference (``dapo+kl``, beta 0.5, TP1 and TP2: the
  losses, gradient norms and ``kl`` equal TRL's); end to end with LoRA, the logged KL is 0 at step 1 and above 0 after.
- Refusals, before any process group exists: --pp, --ep, --ray, --environment, --rollout-engine vllm, a world that
  is no multiple of --tp, a family with multi-token-prediction layers.

What the selected tests need of this engine runs in one process per TP size (conftest's ``CliRuns``): the TP1
``swiftcore train`` runs and parity script in one process, the TP2 and data-parallel ones in one torchrun world of 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

STARTS_RANKS = True  # torchrun worlds (the repository conftest's rank lock)
STEPS = 3
#: The parity check's learning rate (small enough that step 2's ratios stay partly inside the clip range, so its
#: gradients are not all zero) and the learning test's.
PARITY_LR = 3e-5
LR = 1e-3
TEMPERATURE = 0.7
#: ``--grpo-beta`` of the parity cases with the KL term (``dapo+kl``): large enough to move the losses well past the
#: tolerance.
KL_BETA = 0.5
#: The fixed batch's completion lengths (2 prompts x groups of 4), rewards and prompt length.
LENGTHS = (3, 6, 1, 4, 5, 2, 6, 3)
REWARDS = (1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.5)
PROMPT = 5

#: One rank's side of the parity check: the GRPO loop of this engine, three optimiser steps on the fixed batch, for
#: each ``[loss type, result file]`` of the cases file in turn (one run per TP size, in the process or torchrun world of
#: this module's ``swiftcore train`` runs of that size, does all its cases).
MEGATRON_STEPS = """
import json, sys, torch
from pathlib import Path
from swiftcore_megatron import init_model_parallel, read_hf_config, resolve_bridge
from swiftcore_recipe_rl import GRPOOptions
from swiftcore_train import TrainConfig
import swiftcore.api
from swiftcore_train_megatron.engine import load_sharded_model
from swiftcore_train_megatron.grpo import GRPOLoop
from swiftcore_train_megatron.layout import ParallelLayout, world_size
from swiftcore_train_megatron.recipe import _schedule_and_optimizer

batch_file, cases_file, temperature, lr, steps, beta = sys.argv[1:7]
tp = world_size()
plugins = swiftcore.api.load_plugins(env={})
for model_dir, case, out_file in json.loads(Path(cases_file).read_text()):  # each case of this world's TP
    loss_type, _, kl = case.partition("+")  # "dapo+kl": with the KL term to the reference (--grpo-beta)
    bridge_spec, bridge = resolve_bridge(read_hf_config(Path(model_dir)), plugins)
    cfg = TrainConfig(model=model_dir, dataset=("unused",), output_dir=str(Path(out_file).parent), tuner="full",
                      learning_rate=float(lr), lr_scheduler="constant", batch_size=2, max_steps=int(steps), seed=0)
    options = GRPOOptions(reward=("format",), num_generations=4, max_completion_length=6, grpo_loss_type=loss_type,
                          rollout_temperature=float(temperature), grpo_beta=float(beta) if kl else 0.0)
    init_model_parallel(tp, 1, seed=0)  # again for each case: megatron's state rebuilt and re-seeded, as in a new world
    model = load_sharded_model(bridge, model_dir, tp=tp, ep=1)
    layout = ParallelLayout(tp=tp)
    schedule, optimizer, scheduler = _schedule_and_optimizer(cfg, Path(cfg.output_dir), model, 2, layout, tp)
    loop = GRPOLoop(cfg=cfg, output_dir=Path(cfg.output_dir), model=model, optimizer=optimizer, scheduler=scheduler,
                    schedule=schedule, train_samples=[], val_samples=[], pad_token_id=0, bridge=bridge,
                    bridge_name=bridge_spec.name, layout=layout, extras={}, options=options)
    if kl:  # the reference: the checkpoint as it starts, as grpo.megatron loads it
        loop.attach_reference(load_sharded_model(bridge, model_dir, tp=tp, ep=1))
    batch = torch.load(batch_file)
    model.train()
    with torch.no_grad():  # the initial weights sampled the batch: later steps are off-policy (ratio and clipping)
        from swiftcore_train_megatron.grpo import completion_logps
        batch["old_per_token_logps"] = completion_logps(model, batch, float(temperature))
    tp_rank0 = torch.distributed.get_rank() == 0
    got = [(loss, norm, metrics.get("aux_loss"), metrics.get("kl")) for loss, norm, metrics in
           (loop.learn(batch) for _ in range(int(steps)))]
    from swiftcore_train_megatron.grpo import hf_tensors, model_named_tensors
    from swiftcore.api.models import resolve_model_spec
    weights = hf_tensors(model, bridge)  # what the weight sync pushes to the rollout engine, under its model's names
    weights = model_named_tensors(weights, resolve_model_spec(model_dir, plugins), model_dir) if tp_rank0 else {}
    if torch.distributed.get_rank() == 0:
        Path(out_file).write_text(json.dumps(got))
        torch.save(weights, Path(out_file).with_suffix(".pt"))
"""


@pytest.fixture(scope="module")
def tiny(tiny_model_dir) -> Path:
    return tiny_model_dir("qwen3_5")


@pytest.fixture(scope="module")
def fixed_batch(tmp_path_factory) -> Path:
    """The fixed rollouts as TRL's loss reads them (prompts of one length: no left padding), saved for the ranks."""
    import torch
    from swiftcore_train_megatron.grpo import group_advantages

    gen = torch.Generator().manual_seed(3)
    rows, width = len(LENGTHS), max(LENGTHS)
    prompts = torch.randint(10, 200, (2, PROMPT), generator=gen).repeat_interleave(4, dim=0)
    completion_mask = (torch.arange(width)[None, :] < torch.tensor(LENGTHS)[:, None]).long()
    completion_ids = torch.randint(10, 200, (rows, width), generator=gen) * completion_mask
    rewards = torch.tensor(REWARDS).unsqueeze(1)
    batch = {
        "prompt_ids": prompts,
        "prompt_mask": torch.ones_like(prompts),
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": group_advantages(rewards, torch.ones(1), 4, "group"),
        "num_items_in_batch": completion_mask.sum(),
    }
    path = tmp_path_factory.mktemp("batch") / "batch.pt"
    torch.save(batch, path)
    return path


def _transformers_steps(model_dir: Path, batch_file: Path, out: Path, case: str) -> tuple[list, dict]:
    """The ``grpo`` recipe's trainer (TRL's GRPOTrainer, full weights, fp32): 3 steps of its own loss on the batch
    (``case``: the loss type, ``+kl`` with ``--grpo-beta`` :data:`KL_BETA`); ``(loss, gradient norm, router aux loss
    (None on a dense model) and KL (None without the term) of each step, the model's state dict after them)``."""
    import torch
    from datasets import Dataset
    from swiftcore_recipe_rl import GRPOOptions, grpo_config, trainer_class
    from swiftcore_train import TrainConfig

    import swiftcore.api
    from swiftcore.api.models import load_model, load_tokenizer, resolve_model_spec

    plugins = swiftcore.api.load_plugins(env={})
    spec = resolve_model_spec(str(model_dir), plugins)
    tokenizer = load_tokenizer(str(model_dir))
    cfg = TrainConfig(
        model=str(model_dir), dataset=("unused",), output_dir=str(out), tuner="full", learning_rate=PARITY_LR,
        lr_scheduler="constant", batch_size=2, max_steps=STEPS, seed=0,
    )  # fmt: skip
    loss_type, _, kl = case.partition("+")
    options = GRPOOptions(reward=("format",), num_generations=4, max_completion_length=6, grpo_loss_type=loss_type,
                          rollout_temperature=TEMPERATURE, grpo_beta=KL_BETA if kl else 0.0)  # fmt: skip
    torch.manual_seed(0)
    trainer = trainer_class("grpo")(
        model=load_model(spec, str(model_dir), plugins, torch_dtype="float32"),
        reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
        args=grpo_config(cfg, options, out, reward_names=["format"]),
        train_dataset=Dataset.from_list([{"prompt": "p"}] * 4),
        processing_class=tokenizer,
    )
    trainer.current_gradient_accumulation_steps = 1
    model = trainer.model
    optimizer = trainer.create_optimizer()
    batch = torch.load(batch_file)
    model.train()
    with torch.no_grad():  # the initial weights sampled the batch: later steps are off-policy (ratio and clipping)
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        old, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, mask, batch["completion_ids"].size(1))
        if kl:  # TRL's reference model (built from the checkpoint by TRL) scores the rollouts as they are sampled
            ref, _, _ = trainer._get_per_token_logps_and_entropies(
                trainer.ref_model, ids, mask, batch["completion_ids"].size(1)
            )
            batch["ref_per_token_logps"] = ref
    batch["old_per_token_logps"] = old
    got = []
    for _ in range(STEPS):
        loss = trainer._compute_loss(model, batch)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        aux = trainer._metrics["train"]["aux_loss"][-1] if trainer.aux_loss_enabled else None
        got.append((float(loss.detach()), float(norm), aux, trainer._metrics["train"]["kl"][-1] if kl else None))
    return got, {k: v.detach().clone() for k, v in model.state_dict().items()}


PARITY_TEST = "test_the_first_losses_equal_the_transformers_engine"


def _parity_cases(selected_params: list[tuple[str, dict]]) -> set[tuple[str, int, str]]:
    """The ``(family, tp, loss type)`` cases of the parity test this session runs (only those, under ``-k``)."""
    return {(p["family"], p["tp"], p["loss_type"]) for test, p in selected_params if test == PARITY_TEST}


@pytest.fixture(scope="module")
def transformers_steps(tiny_model_dir, fixed_batch, selected_params, tmp_path_factory) -> dict[tuple, tuple]:
    """``{(family, loss type): (steps, state dict)}`` of the transformers engine, for the selected parity cases."""
    out = tmp_path_factory.mktemp("transformers")
    cases = sorted({(family, loss_type) for family, _, loss_type in _parity_cases(selected_params)})
    return {(f, t): _transformers_steps(tiny_model_dir(f), fixed_batch, out / f / t, t) for f, t in cases}


def _plan_megatron_steps(cli_runs, models: dict[str, Path], batch: Path, out: Path, tp: int, cases: list) -> dict:
    """Plan this engine's GRPO loop on ``tp`` ranks, 3 steps on the batch for each ``(family, loss type)`` of
    ``cases`` (``models``: each family's checkpoint), all in one run of :data:`MEGATRON_STEPS` (key
    ``("parity", tp)``, in the world of this module's runs of that size); ``{(family, loss type): its result
    file}``."""
    out.mkdir(parents=True, exist_ok=True)
    script = out / "steps.py"
    script.write_text(MEGATRON_STEPS)
    results = {(f, t): out / f / t / "steps.json" for f, t in cases}
    for result in results.values():
        result.parent.mkdir(parents=True, exist_ok=True)
    listed = out / "cases.json"
    listed.write_text(json.dumps([[str(models[f]), t, str(result)] for (f, t), result in results.items()]))
    argv = [batch, listed, TEMPERATURE, PARITY_LR, STEPS, KL_BETA]
    cli_runs.plan_script(("parity", tp), script, argv, out, ranks=tp, group="grpo")
    return results


@pytest.fixture(scope="module")
def planned(cli_runs, selected_params, tiny, tiny_model_dir, request, tmp_path_factory) -> dict[int, dict]:
    """Plans, with conftest's ``CliRuns``, what the selected tests ask for: the ``swiftcore train`` runs of
    :data:`CLI_RUNS` and, for each TP size of the selected parity cases, one run of :data:`MEGATRON_STEPS` for all of
    them; those of one size run together (the TP1 ones in one process, the TP2 ones in a torchrun world of 2) when the
    first is asked for. ``{tp: {(family, loss type): the parity result file}}``."""
    root = tmp_path_factory.mktemp("runs")
    for test, _ in selected_params:
        for key, (steps, lr, tp, *rest) in CLI_RUNS.get(test, {}).items():
            model = tiny_model_dir(rest[0]) if rest and rest[0] else tiny
            replicas = rest[2] if len(rest) > 2 else 1
            args = _grpo_args(model, root / key, steps=steps, lr=lr, tp=tp, replicas=replicas)
            args += [a.replace("{runs}", str(root)) for a in (rest[1] if len(rest) > 1 else ())]
            cli_runs.plan(key, args, root / key / "out", ranks=tp * replicas, group="grpo")
    cases = _parity_cases(selected_params)
    batch = request.getfixturevalue("fixed_batch") if cases else None
    models = {family: tiny_model_dir(family) for family, _, _ in cases}
    return {
        tp: _plan_megatron_steps(
            cli_runs, models, batch, root / f"tp{tp}", tp, sorted((f, t) for f, n, t in cases if n == tp)
        )
        for tp in sorted({n for _, n, _ in cases})
    }


@pytest.fixture(scope="module")
def megatron_steps(planned, cli_runs):
    """``megatron_steps(family, tp, loss_type) -> (steps, synced tensors)``: the selected parity cases of a TP size,
    all in one run of :data:`MEGATRON_STEPS` (:func:`_plan_megatron_steps`), made when the first of them is asked
    for."""
    import torch

    def get(family: str, tp: int, loss_type: str) -> tuple[list, dict]:
        cli_runs.get(("parity", tp))  # a failure is reported to each case of this world, which runs once
        result = planned[tp][family, loss_type]
        return json.loads(result.read_text()), torch.load(result.with_suffix(".pt"))

    return get


@pytest.mark.slow
@pytest.mark.parametrize(
    ("family", "tp", "loss_type"),
    [
        ("qwen3_5", 1, "dapo"),
        ("qwen3_5", 2, "dapo"),
        ("qwen3_5", 1, "grpo"),
        ("qwen3_5", 1, "dapo+kl"),
        ("qwen3_5", 2, "dapo+kl"),
        ("olmoe", 1, "dapo"),
        ("olmoe", 2, "dapo"),
    ],
    ids=["tp1", "tp2", "tp1-grpo", "tp1-kl", "tp2-kl", "olmoe-tp1", "olmoe-tp2"],
)
def test_the_first_losses_equal_the_transformers_engine(family, tp, loss_type, transformers_steps, megatron_steps):
    """Also the weight sync's tensors after the 3 steps: the names of the transformers model's own parameters (what
    the rollout engine's ``update_weights`` takes) and its values after the same steps, gathered over the TP ranks.

    OLMoE (MoE): the loss has TRL's ``router_aux_loss_coef * aux_loss`` of the policy's forward, the megatron routers'
    logits through transformers' formula (``RouterAuxLoss``; at TP2 under sequence parallelism, the routers' slices
    gathered); its ``aux_loss`` equals TRL's at every step."""
    expected, reference = transformers_steps[family, loss_type]
    got, synced = megatron_steps(family, tp, loss_type)
    print(f"{family} {loss_type} tp{tp}: transformers {expected}\n megatron {got}")
    assert len(got) == STEPS
    for step, (mine, want) in enumerate(zip(got, expected, strict=True), start=1):
        (loss, norm, aux, kl), (want_loss, want_norm, want_aux, want_kl) = mine, want
        assert loss == pytest.approx(want_loss, rel=1e-5, abs=1e-5), (step, got, expected)
        assert norm == pytest.approx(want_norm, rel=1e-5, abs=1e-5), (step, got, expected)
        assert (aux is None) == (want_aux is None) == (family != "olmoe"), (step, got, expected)
        if aux is not None:
            assert aux == pytest.approx(want_aux, rel=1e-5), (step, got, expected)
        assert (kl is None) == (want_kl is None) == ("+kl" not in loss_type), (step, got, expected)
        if kl is not None:
            assert kl == pytest.approx(want_kl, rel=1e-5, abs=1e-9), (step, got, expected)
    if "+kl" in loss_type:  # the reference is the initial weights: no KL at step 1, then the steps move away from it
        assert expected[0][3] == 0 and expected[-1][3] > 1e-6, expected
    assert abs(expected[-1][0] - expected[1][0]) > 1e-4 and expected[-1][1] > 0, "the losses and gradients must move"
    assert synced and set(synced) <= set(reference), sorted(set(synced) - set(reference))[:5]
    for name, tensor in synced.items():
        assert tensor.shape == reference[name].shape, name
        assert float((tensor - reference[name]).abs().max()) < 1e-5, name


def test_group_advantages_are_trls_formula():
    """Group-normalised rewards (unbiased std, + 1e-4), batch-scaled, unscaled; a NaN row gets 0 and is left out."""
    import torch
    from swiftcore_train_megatron.grpo import group_advantages

    per_func = torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.5, 1.0], [float("nan"), float("nan")]])
    weights = torch.tensor([1.0, 2.0])
    rewards = torch.tensor([1.0, 0.0, 2.5])
    group = group_advantages(per_func, weights, 4, "group")
    mean, std = rewards.mean(), rewards.std()
    assert torch.allclose(group[:3], (rewards - mean) / (std + 1e-4), atol=1e-6)
    assert group[3] == 0
    plain = group_advantages(per_func, weights, 2, "none")
    assert torch.allclose(plain, torch.tensor([0.5, -0.5, 0.0, 0.0]), atol=1e-6)
    batch = group_advantages(per_func, weights, 2, "batch")
    assert torch.allclose(batch[:2], torch.tensor([0.5, -0.5]) / (std + 1e-4), atol=1e-6)


# ---------------------------------------------------------------------------------------------- learning signal

VOWEL = r"format.pattern=^\s*[aeiouAEIOU]"


def _mean_reward(model_dir: Path, prompts: list[str], plugins, samples: int = 8) -> float:
    """The mean ``format`` reward of ``samples`` sampled replies (temperature 1, seed 0) to each prompt, generated by
    the transformers backend from ``model_dir``."""
    import re

    import torch
    from swiftcore_infer import Request, SamplingParams, create_engine

    torch.manual_seed(0)
    engine = create_engine("transformers", str(model_dir), plugins, template="qwen3_5", device="cpu")
    try:
        sampling = SamplingParams(max_new_tokens=4, temperature=1.0)
        requests = [Request(record={"messages": [{"role": "user", "content": p}]}, sampling=sampling)
                    for p in prompts for _ in range(samples)]  # fmt: skip
        texts = [g.text for g, _ in engine.generate_rollouts(requests)]
    finally:
        engine.close()
    return sum(bool(re.match(r"^\s*[aeiouAEIOU]", t)) for t in texts) / len(texts)


def _grpo_args(model: Path, work: Path, *, steps: int, lr: float, tp: int = 1, replicas: int = 1) -> list[str]:
    """What follows ``swiftcore`` for ``swiftcore train --engine megatron --recipe grpo`` on the vowel task (16
    prompts, 2 a step, 8 completions of up to 4 tokens, full weights, constant ``lr``, seed 0) at ``--tp tp`` (on a
    world of ``tp x replicas`` ranks; ``--batch-size`` is per replica: ``2 / replicas``), writing ``work/out``."""
    work.mkdir(parents=True, exist_ok=True)
    data = work / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Write a word, number {i}."}) + "\n" for i in range(16)))
    return ["train", "--tp", str(tp), "--engine", "megatron", "--recipe", "grpo", "--model", str(model),
            "--dataset", str(data), "--output-dir", str(work / "out"), "--tuner", "full", "--learning-rate", str(lr),
            "--lr-scheduler", "constant", "--max-steps", str(steps), "--batch-size", str(2 // replicas),
            "--logging-steps", "1",
            "--save-steps", "1000", "--seed", "0", "--no-plot", "--reward", "format", "--reward-option", VOWEL,
            "--num-generations", "8", "--max-completion-length", "4", "--rollout-engine", "transformers"]  # fmt: skip


#: The 3-step TP1 run the TP2, data-parallel and resumed runs are compared with (it also saves checkpoint-2).
TP1 = (3, 1e-4, 1, None, ("--save-steps", "2"))
#: The ``swiftcore train`` runs each test asks for: key -> (steps, learning rate, tp[, family (None: qwen3_5)[, more
#: arguments ("{runs}" is the runs' root)[, data-parallel replicas]]]).
CLI_RUNS = {
    "test_grpo_raises_the_held_out_reward_on_the_toy_task": {"learn": (6, LR, 1)},
    "test_a_tp2_run_logs_the_steps_of_a_tp1_run": {"tp1": TP1, "tp2": (3, 1e-4, 2)},
    "test_two_data_parallel_replicas_log_the_steps_of_one": {"tp1": TP1, "dp2": (3, 1e-4, 1, None, (), 2)},
    "test_a_resumed_run_repeats_the_uninterrupted_ones_last_step": {
        "tp1": TP1, "resumed": (3, 1e-4, 1, None, ("--resume-from-checkpoint", "{runs}/tp1/out/checkpoint-2")),
    },
    "test_a_moe_run_syncs_every_expert_and_adds_the_router_loss": {"olmoe": (2, 1e-4, 1, "olmoe")},
    "test_a_run_with_grpo_beta_logs_its_kl_to_the_start": {
        "kl": (2, LR, 1, None, ("--grpo-beta", "0.1", "--tuner", "lora", "--learning-rate", "5e-3"))
    },
}


@pytest.fixture(scope="module")
def grpo_runs(planned, cli_runs, logged):
    """``grpo_runs(key) -> (output directory, logged step records)``: this module's ``swiftcore train`` runs
    (:data:`CLI_RUNS`, planned by :func:`planned`: the TP1 runs in one process, the TP2 run in a torchrun world of 2,
    each with the parity script of its size) made when the first is asked for."""

    def get(key: str) -> tuple[Path, list[dict]]:
        out = cli_runs.get(key)
        return out, [record for record in logged(out) if "loss" in record]

    return get


@pytest.mark.slow
def test_grpo_raises_the_held_out_reward_on_the_toy_task(tiny, grpo_runs):
    """The rollouts' own rewards rise too (the engine generates them: it gets the trained weights each step)."""
    import swiftcore.api

    held_out = [f"Write a word, item {i}." for i in range(8)]
    steps = 6
    out, logs = grpo_runs("learn")
    rewards = [r["rewards/format/mean"] for r in logs]
    synced = [r["sync_bytes"] for r in logs]
    assert len(rewards) == steps and synced[0] == 0 and all(b > 0 for b in synced[1:]), logs
    assert sum(rewards[-3:]) / 3 - rewards[0] >= 0.4, rewards
    plugins = swiftcore.api.load_plugins(env={})
    before = _mean_reward(tiny, held_out, plugins)
    after = _mean_reward(out / f"checkpoint-{steps}", held_out, plugins)
    print(f"grpo.megatron toy task: held-out mean reward {before:.3f} -> {after:.3f}; rollouts per step {rewards}")
    assert after - before >= 0.4 and after >= 0.7, (before, after, rewards)


@pytest.mark.slow
def test_a_tp2_run_logs_the_steps_of_a_tp1_run(grpo_runs):
    """End to end at TP2 (2 torchrun ranks): the same rollouts (sampled under --seed and the step, from the weights
    the sync gathered over both ranks), rewards, losses and gradient norms as at TP1, 3 steps at lr 1e-4."""
    _, one = grpo_runs("tp1")
    _, two = grpo_runs("tp2")
    print(f"tp1 {[(r['reward'], r['grad_norm']) for r in one]}\ntp2 {[(r['reward'], r['grad_norm']) for r in two]}")
    assert len(one) == len(two) == 3
    for a, b in zip(one, two, strict=True):
        assert a["reward"] == b["reward"] and a["completions/mean_length"] == b["completions/mean_length"], (a, b)
        for key in ("loss", "grad_norm"):
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-5), (key, a, b)
    assert one[1]["sync_bytes"] == two[1]["sync_bytes"] > 0


@pytest.mark.slow
def test_a_resumed_run_repeats_the_uninterrupted_ones_last_step(grpo_runs, resumed_weights_gap):
    """``--resume-from-checkpoint`` the 3-step TP1 run's checkpoint-2 (weights, AdamW state, schedule, RNG): step 3's
    rollouts (sampled under --seed and the step, by an engine synced to the checkpoint's weights), rewards, loss,
    gradient norm and weight sync are the uninterrupted run's, and so are the final weights."""
    whole_dir, whole = grpo_runs("tp1")
    resumed_dir, resumed = grpo_runs("resumed")
    print(f"uninterrupted step 3 {whole[-1]}\nresumed {resumed}")
    assert [r["step"] for r in whole] == [1, 2, 3] and [r["step"] for r in resumed] == [3], resumed
    a, b = whole[-1], resumed[-1]
    assert a["reward"] == b["reward"] and a["completions/mean_length"] == b["completions/mean_length"], (a, b)
    assert a["sync_bytes"] == b["sync_bytes"] > 0  # the resumed engine got the checkpoint's weights at step 3
    for key in ("loss", "grad_norm"):
        assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-5), (key, a, b)
    assert a["grad_norm"] != whole[-2]["grad_norm"]  # step 3 is no copy of step 2
    gap, moved = resumed_weights_gap(whole_dir, resumed_dir, 3)  # AdamW's state restored: the same update
    assert gap < 1e-6 < moved, (gap, moved)


@pytest.mark.slow
def test_two_data_parallel_replicas_log_the_steps_of_one(grpo_runs):
    """End to end with 2 data-parallel replicas (2 torchrun ranks at --tp 1, --batch-size 1 each): rank 0 samples
    the round of both replicas' prompts (the prompts of the one-replica run at --batch-size 2: the schedule deals
    the batches to the replicas in turn), each replica learns on its prompt's 8 completions (TRL's ``dapo``
    normaliser: the round's completion tokens over the 2 processes) and the gradients are summed over the replicas:
    the same rewards, losses, gradient norms and clip ratios as one replica, 3 steps at lr 1e-4."""
    _, one = grpo_runs("tp1")
    _, two = grpo_runs("dp2")
    print(f"1 replica {[(r['loss'], r['grad_norm']) for r in one]}")
    print(f"2 replicas {[(r['loss'], r['grad_norm']) for r in two]}")
    assert len(one) == len(two) == 3
    for a, b in zip(one, two, strict=True):
        assert a["reward"] == b["reward"] and a["completions/mean_length"] == b["completions/mean_length"], (a, b)
        for key in ("loss", "grad_norm", "clip_ratio/region_mean", "clip_ratio/high_max"):
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-5), (key, a, b)
    # On-policy rollouts whose completions all have 4 tokens: the loss is 0 at every step; the gradient norms check the
    # normalisation and the reduction over the replicas (a replica's loss not divided by 2 doubles them).
    assert all(r["grad_norm"] > 1.0 for r in one) and len({r["grad_norm"] for r in one}) == 3, one
    assert one[1]["sync_bytes"] == two[1]["sync_bytes"] > 0


# ---------------------------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("family", "options", "expected"),
    [
        ("qwen3_5", {"recipe_options": {"pp": 2}}, "--pp 2 / --vpp 1: GRPO does not run through pipeline stages"),
        ("qwen3_5", {"recipe_options": {"ep": 2}}, "--ep 2: GRPO trains dense families only so far"),
        ("qwen3_5", {"recipe_options": {"ray": True}}, "--ray: GRPO on this engine runs its rollouts in rank 0"),
        ("qwen3_5", {"recipe_options": {"environment": "calculator"}}, "--environment: multi-turn episodes are not"),
        ("qwen3_5", {"recipe_options": {"rollout_engine": "vllm"}}, "--rollout-engine vllm: this engine generates"),
        (
            "qwen3_5",
            {"world": 3, "recipe_options": {"tp": 2}},
            "world size 3 (processes launched) is not a multiple of --tp 2",
        ),
        ("glm5_with_mtp", {}, "builds multi-token-prediction (MTP) layers"),
    ],
    ids=["pp", "ep", "ray", "environment", "vllm", "world", "mtp"],
)
def test_what_grpo_megatron_does_not_do_is_refused(
    family, options, expected, tiny_model_dir, tmp_path, monkeypatch, no_process_group_after, request
):
    import re

    from swiftcore_train import TrainConfig, run_training

    from swiftcore._plugins import load_plugins
    from swiftcore.api import SwiftcoreError

    if world := options.pop("world", None):
        monkeypatch.setenv("WORLD_SIZE", str(world))
    data = tmp_path / "prompts.jsonl"
    data.write_text(json.dumps({"prompt": "hi"}) + "\n")
    recipe_options = {"reward": ("format",), **options.pop("recipe_options", {})}
    model = request.getfixturevalue(family) if family == "glm5_with_mtp" else tiny_model_dir(family)
    cfg = TrainConfig(
        model=str(model), dataset=(str(data),), output_dir=str(tmp_path / "out"), engine="megatron",
        recipe="grpo", max_steps=1, recipe_options=recipe_options, **{"tuner": "full", **options},
    )  # fmt: skip
    with pytest.raises(SwiftcoreError, match=re.escape(expected)):
        run_training(cfg, load_plugins(env={}))
    assert not (tmp_path / "out").exists(), "nothing is written before the checks pass"


@pytest.mark.slow
def test_a_moe_run_syncs_every_expert_and_adds_the_router_loss(grpo_runs, tiny_model_dir):
    """``swiftcore train --engine megatron --recipe grpo`` on OLMoE, 2 steps: every step logs TRL's router
    load-balancing loss, and step 2's weight sync moves the whole model into the rollout engine, its experts under the
    transformers model's fused names (the engine refuses a name its model does not have, so a sync under the
    checkpoint's per-expert names fails the run; the values synced are the parity test's)."""
    import math

    from safetensors import safe_open

    _, records = grpo_runs("olmoe")
    steps = [r for r in records if "loss" in r]
    print(f"grpo.megatron olmoe: {steps}")
    assert [r["step"] for r in steps] == [1, 2]
    assert all(r["aux_loss"] > 0 for r in steps), steps
    model_bytes = 0
    for file in tiny_model_dir("olmoe").glob("*.safetensors"):
        with safe_open(str(file), "pt") as f:
            model_bytes += sum(math.prod(f.get_slice(k).get_shape()) * 4 for k in f.keys())
    assert steps[0]["sync_bytes"] == 0 and steps[1]["sync_bytes"] >= model_bytes, (steps, model_bytes)


@pytest.mark.slow
def test_a_run_with_grpo_beta_logs_its_kl_to_the_start(grpo_runs):
    """``swiftcore train --engine megatron --recipe grpo --grpo-beta 0.1 --tuner lora``, 2 steps: the reference is the
    base checkpoint (loaded by the recipe beside the policy; TRL's reference of a new adapter: the adapter off), so
    TRL's KL estimate is 0 at step 1 (the adapter starts as the identity) and above 0 at step 2, after one optimiser
    step moved the adapter. (The loss with the KL term is the parity test's ``dapo+kl`` cases, full weights.)"""
    _, records = grpo_runs("kl")
    steps = [r for r in records if "loss" in r]
    print(f"grpo.megatron --grpo-beta 0.1: kl {[r.get('kl') for r in steps]}")
    assert [r["step"] for r in steps] == [1, 2]
    assert steps[0]["kl"] == pytest.approx(0.0, abs=1e-9) and steps[1]["kl"] > 1e-6, steps
