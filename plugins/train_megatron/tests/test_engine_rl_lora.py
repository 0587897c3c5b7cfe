"""``swiftcore train --engine megatron --recipe grpo|gkd --tuner lora``: the online recipes on this engine with the
engine's LoRA (``swiftcore_train_megatron.lora``) and a LoRA-only weight sync to the rollout engine.

- Loss parity on a fixed batch (``grpo``: ``test_engine_grpo.py``'s 2 prompts x groups of 4 with fixed advantages,
  off-policy after step 1; ``gkd``: ``test_engine_gkd.py``'s 4 completions, ``--gkd-beta 0.5``, the seed-1 tiny
  model as the teacher), fp32, rank 4, alpha 8 on the family's default targets (every linear layer of Qwen3.5, the
  fused q/k/v, gate/up and gated-DeltaNet input projections included): the first 3 step losses and gradient norms
  equal those of the recipe's trainer on the transformers engine (TRL's GRPOTrainer / DistillationTrainer on the
  peft policy ``apply_tuner`` makes, the same AdamW step) to 1e-5, at TP1 and TP2 (real processes on gloo, TP2 a
  torchrun world of 2). Both start from the same adapter: the peft one, saved and given to this engine as
  ``--lora-init-adapter``. ``grpo_kl``: GRPO with ``--grpo-beta`` from a trained adapter (lora_B moved off zero):
  TRL's reference is a frozen copy of that adapter ("ref"), this engine's the base with ``--lora-init-adapter``
  loaded (``grpo.load_reference``); a reference without the adapter (the base) puts a KL of the adapter's size into
  step 1's loss.
- The LoRA-only sync, in the same runs: rank 0 holds a real transformers rollout engine with the recipe's
  ``WeightSync``; the loop syncs before each step (step 0 attaches the adapter) and once after the last. Every
  ``update_adapter`` call carries exactly the peft policy's adapter tensors by name (``get_peft_model_state_dict``),
  there is no ``update_weights`` call, the adapter is loaded once, and after the last sync the engine's adapter
  equals the peft policy's after the same steps (values), and the engine's logits equal the policy's (the scaling
  the engine runs is the policy's too; its base model's logits differ, so the equality is no accident).
- End to end: ``swiftcore train --engine megatron --recipe grpo --tuner lora`` (3 steps, TP1) logs a sync at every
  step of the adapter's bytes only (the same every step, a small share of the full weights' bytes) and saves a peft
  adapter.
- Learning signal: the vowel task (``test_engine_grpo.py``'s; 8 steps, rank 8, alpha 32, lr 5e-3): the rollouts,
  sampled with the synced adapter, earn more (mean reward 0.125 at step 1, about 0.9 over the last three), and the
  saved adapter, loaded by the transformers backend, raises the mean reward on 8 held-out prompts from 0.25 to about
  0.97. With the rollouts sampled from the base model instead (no adapter on the requests) the rollouts' reward
  stays near 0.1 and the test fails.
- Refusals that remain with ``--tuner lora``, before any process group exists: --pp, --ep, --rollout-engine vllm,
  a world that is no multiple of --tp, a family with multi-token-prediction layers, a MoE family (both recipes:
  MoE trains with --tuner full).

What the selected tests need of this engine runs in one process per TP size (conftest's ``CliRuns``): the
``swiftcore train`` runs (TP1) and the TP1 parity script in one process, the TP2 parity script in one torchrun world
of 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

# make test (CI) leaves this module to make test-all: megatron GRPO/GKD with LoRA against the transformers engine;
# megatron GRPO parity stays in make test (test_engine_grpo.py) (docs/testing.md, "Two tiers").
pytestmark = pytest.mark.extended

STARTS_RANKS = True  # torchrun worlds (the repository conftest's rank lock)
STEPS = 3
SEED = 0
RANK, ALPHA = 4, 8
#: The adapter (B = 0 at the start) moves the losses of steps 2 and 3 well past the tolerance, and GRPO's ratios stay
#: partly inside the clip range at step 3 (at 2e-3 all were clipped: a zero gradient).
LR = 3e-4
TEMPERATURE = 0.7
#: The GRPO batch (2 prompts x groups of 4) and the GKD batch (4 prompts): completion lengths; the rewards; prompts.
GRPO_LENGTHS = (3, 6, 1, 4, 5, 2, 6, 3)
REWARDS = (1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.5)
GKD_LENGTHS = (3, 6, 1, 4)
PROMPT = 5
#: The learning test's steps and learning rate (LoRA: B starts at zero, so a larger rate than full weights' 1e-3).
LEARN_STEPS, LEARN_LR = 8, 5e-3
#: The probe the engine's and the policy's logits are compared on.
PROBE = list(range(11, 27))
#: ``grpo_kl``: ``--grpo-beta``, from a trained adapter (its lora_B moved off zero by this much noise), which TRL keeps
#: as its frozen reference ("ref" adapter): at step 1 the policy is its reference (KL 0), where the base would not be.
KL_BETA, TRAINED_B = 0.5, 0.05

#: One rank's side: the recipe's loop of this engine with LoRA from the peft init, 3 optimiser steps on the fixed batch,
#: a LoRA-only sync to a real transformers rollout engine (rank 0) before each step and after the last, what each sync
#: sent, and the engine's adapter and logits at the end; for each ``[recipe, peft init, batch file, result file]`` of
#: the cases file in turn (one run per TP size, in the process or torchrun world of this module's other runs of that
#: size, does all its cases; it puts back the engine methods it records).
MEGATRON_STEPS = """
import json, os, sys, torch
from pathlib import Path
from safetensors import safe_open
from swiftcore_infer import Engine
from swiftcore_megatron import init_model_parallel, read_hf_config, resolve_bridge
from swiftcore_recipe_rl import GKDOptions, GRPOOptions, WeightSync, create_rollout_engine
from swiftcore_train import TrainConfig
import swiftcore.api
from swiftcore.api.models import resolve_model_spec
from swiftcore_train_megatron.engine import load_sharded_model
from swiftcore_train_megatron.gkd import GKDLoop, load_teacher
from swiftcore_train_megatron.grpo import GRPOLoop, completion_logps, load_reference
from swiftcore_train_megatron.layout import ParallelLayout, world_size
from swiftcore_train_megatron.recipe import _add_lora, _schedule_and_optimizer

model_dir, teacher_dir, cases_file, lr, steps, rank, alpha, probe, beta = sys.argv[1:10]
tp = world_size()
plugins = swiftcore.api.load_plugins(env={})
spec = resolve_model_spec(model_dir, plugins)
_, bridge = resolve_bridge(read_hf_config(Path(model_dir)), plugins)
rank0 = os.environ.get("RANK", "0") == "0"  # torchrun's (the process group comes with the first case)
sent = []  # the engine calls of the current case (a new list for each)
originals = {}
if rank0:  # what attach_rollouts builds (the engine and the recipe's WeightSync), every engine call recorded
    for method in ("update_adapter", "update_weights", "load_adapter"):
        original = originals[method] = getattr(Engine, method)
        def recording(self, *args, _method=method, _original=original):
            if _method == "load_adapter":
                with safe_open(str(Path(args[1]) / "adapter_model.safetensors"), framework="pt") as f:
                    names = list(f.keys())
                config = json.loads((Path(args[1]) / "adapter_config.json").read_text())
                sent.append([_method, sorted(names), [config["r"], config["lora_alpha"]]])
            else:
                tensors = args[-1]
                names = list(tensors) if isinstance(tensors, dict) else [name for name, _ in tensors]
                sent.append([_method, sorted(names), len(names)])
            return _original(self, *args)
        setattr(Engine, method, recording)
for recipe, init_dir, batch_file, out_file in json.loads(Path(cases_file).read_text()):
    sent = []
    cfg = TrainConfig(model=model_dir, dataset=("unused",), output_dir=str(Path(out_file).parent), tuner="lora",
                      lora_rank=int(rank), lora_alpha=int(alpha), learning_rate=float(lr), lr_scheduler="constant",
                      batch_size=2, max_steps=int(steps), seed=0, recipe_options={"lora_init_adapter": init_dir})
    if recipe.startswith("grpo"):  # grpo_kl: with --grpo-beta, from a trained adapter
        options = GRPOOptions(reward=("format",), num_generations=4, max_completion_length=6, rollout_temperature=0.7,
                              grpo_beta=float(beta) if recipe == "grpo_kl" else 0.0)
    else:
        options = GKDOptions(teacher_model=teacher_dir, gkd_beta=0.5, max_completion_length=6, rollout_temperature=0.7)
    init_model_parallel(tp, 1, seed=0)  # again for each case: megatron's state rebuilt and re-seeded, as in a new world
    model = load_sharded_model(bridge, model_dir, tp=tp, ep=1)
    lora = _add_lora(cfg, spec, bridge, model)
    layout = ParallelLayout(tp=tp)
    schedule, optimizer, scheduler = _schedule_and_optimizer(cfg, Path(cfg.output_dir), model, 2, layout, tp)
    loop = (GRPOLoop if recipe.startswith("grpo") else GKDLoop)(
        cfg=cfg, output_dir=Path(cfg.output_dir), model=model, optimizer=optimizer, scheduler=scheduler,
        schedule=schedule, train_samples=[], val_samples=[], pad_token_id=0, bridge=bridge, bridge_name="qwen3_5",
        layout=layout, extras={}, lora=lora, options=options)
    if recipe == "grpo_kl":  # the reference as grpo.megatron loads it: the base with the starting adapter
        loop.attach_reference(load_reference(cfg, spec, bridge, layout))
    if recipe == "gkd":
        loop.attach_teacher(load_teacher(resolve_model_spec(teacher_dir, plugins), teacher_dir, plugins))
    if rank0:  # a new engine for each case: the adapter is loaded once per engine
        loop.engine = create_rollout_engine("transformers", cfg, plugins, template=None, device="cpu")
        loop.weight_sync = WeightSync(loop.engine)
    batch = torch.load(batch_file)
    model.train()
    if recipe.startswith("grpo"):
        with torch.no_grad():  # the initial weights sampled the batch: later steps are off-policy
            batch["old_per_token_logps"] = completion_logps(model, batch, 0.7)
    got, synced = [], []
    for _ in range(int(steps)):
        synced.append(loop._sync()["sync_bytes"])  # as _train_step: the engine gets the weights the step starts from
        got.append(loop.learn(batch)[:2])
        loop.step += 1
    synced.append(loop._sync()["sync_bytes"])
    if rank0:
        from peft import get_peft_model_state_dict
        engine_model = loop.engine.model
        engine_model.set_adapter(loop.weight_sync.adapter)
        adapter = get_peft_model_state_dict(engine_model, adapter_name=loop.weight_sync.adapter)
        with torch.no_grad():
            logits = engine_model(input_ids=torch.tensor([json.loads(probe)])).logits
        Path(out_file).write_text(json.dumps({"steps": got, "sent": sent, "sync_bytes": synced}))
        torch.save({"adapter": adapter, "logits": logits}, Path(out_file).with_suffix(".pt"))
        loop.engine.close()
for method, original in originals.items():  # later runs of this process use the engine as it is
    setattr(Engine, method, original)
"""


@pytest.fixture(scope="module")
def tiny(tiny_model_dir) -> Path:
    return tiny_model_dir("qwen3_5")


@pytest.fixture(scope="module")
def teacher(tmp_path_factory) -> Path:
    """A second tiny random qwen3_5 (seed 1): the student's vocabulary, other weights (the gkd tests' teacher)."""
    from swiftcore_tiny import make_tiny

    from swiftcore._plugins import load_plugins

    spec = load_plugins(env={}).registry.get("model", "qwen3_5")
    return make_tiny(spec, tmp_path_factory.mktemp("teacher") / "qwen3_5", seed=1)


def _batch(lengths: tuple[int, ...], groups: int) -> dict:
    """Fixed completions in TRL's layout, ``groups`` prompts of one length (no left padding) each repeated to fill
    the rows; with GRPO's group advantages of :data:`REWARDS` when the rows are groups of 4."""
    import torch
    from swiftcore_train_megatron.grpo import group_advantages

    gen = torch.Generator().manual_seed(3)
    rows, width = len(lengths), max(lengths)
    prompts = torch.randint(10, 200, (groups, PROMPT), generator=gen).repeat_interleave(rows // groups, dim=0)
    completion_mask = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).long()
    completion_ids = torch.randint(10, 200, (rows, width), generator=gen) * completion_mask
    batch = {
        "prompt_ids": prompts,
        "prompt_mask": torch.ones_like(prompts),
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "num_items_in_batch": completion_mask.sum(),
    }
    if groups * 4 == rows:
        batch["advantages"] = group_advantages(torch.tensor(REWARDS).unsqueeze(1), torch.ones(1), 4, "group")
    return batch


@pytest.fixture(scope="module")
def batches(tmp_path_factory) -> dict[str, Path]:
    """The fixed batches of both recipes, saved for the ranks."""
    import torch

    root = tmp_path_factory.mktemp("batches")
    paths = {"grpo": root / "grpo.pt", "gkd": root / "gkd.pt"}
    torch.save(_batch(GRPO_LENGTHS, 2), paths["grpo"])
    torch.save(_batch(GKD_LENGTHS, 4), paths["gkd"])
    return paths


def _reference(recipe: str, tiny: Path, teacher: Path, batch_file: Path, out: Path) -> dict:
    """The recipe's trainer on the transformers engine with LoRA (``apply_tuner``'s peft policy, fp32): its initial
    adapter saved to ``out/init`` (this engine's ``--lora-init-adapter``), then 3 steps of its own loss on the batch.
    Returns the init's path, each step's loss and gradient norm, the adapter after the steps (peft's state dict), and
    the policy's and its base model's logits of :data:`PROBE` after them."""
    import torch
    from datasets import Dataset
    from peft import get_peft_model_state_dict
    from swiftcore_recipe_rl import GKDOptions, GRPOOptions, gkd_config, grpo_config, trainer_class
    from swiftcore_train import TrainConfig, apply_tuner

    import swiftcore.api
    from swiftcore.api.models import load_model, load_tokenizer, resolve_model_spec

    plugins = swiftcore.api.load_plugins(env={})
    spec = resolve_model_spec(str(tiny), plugins)
    tokenizer = load_tokenizer(str(tiny))
    tokenizer.padding_side = "left"
    cfg = TrainConfig(
        model=str(tiny), dataset=("unused",), output_dir=str(out), tuner="lora", lora_rank=RANK, lora_alpha=ALPHA,
        learning_rate=LR, lr_scheduler="constant", batch_size=2, max_steps=STEPS, seed=SEED,
    )  # fmt: skip

    def load(path: Path):
        return load_model(resolve_model_spec(str(path), plugins), str(path), plugins, torch_dtype="float32")

    torch.manual_seed(SEED)
    policy = apply_tuner(load(tiny), spec, cfg)
    if recipe == "grpo_kl":  # a trained adapter to start from
        noise = torch.Generator().manual_seed(5)
        with torch.no_grad():
            for name, param in policy.named_parameters():
                if ".lora_B." in name:
                    param.copy_(torch.randn(param.shape, generator=noise) * TRAINED_B)
    policy.save_pretrained(out / "init")
    dataset = Dataset.from_list([{"prompt": "p"}] * 4)
    if recipe.startswith("grpo"):  # TRL adds its "ref" adapter, a copy of the policy's, when beta is set
        beta = KL_BETA if recipe == "grpo_kl" else 0.0
        options = GRPOOptions(reward=("format",), num_generations=4, max_completion_length=6,
                              rollout_temperature=TEMPERATURE, grpo_beta=beta)  # fmt: skip
        trainer = trainer_class("grpo")(
            model=policy, reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
            args=grpo_config(cfg, options, out, reward_names=["format"]), train_dataset=dataset,
            processing_class=tokenizer,
        )  # fmt: skip
        trainer.current_gradient_accumulation_steps = 1
    else:
        options = GKDOptions(teacher_model=str(teacher), gkd_beta=0.5, max_completion_length=6,
                             rollout_temperature=TEMPERATURE)  # fmt: skip
        trainer = trainer_class("gkd")(
            model=policy, teacher_model=load(teacher), args=gkd_config(cfg, options, out), train_dataset=dataset,
            processing_class=tokenizer,
        )  # fmt: skip
    model = trainer.model
    optimizer = trainer.create_optimizer()
    batch = torch.load(batch_file)
    model.train()
    if recipe.startswith("grpo"):
        with torch.no_grad():  # the initial weights sampled the batch: later steps are off-policy
            ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
            mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
            old, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, mask, batch["completion_ids"].size(1))
            if recipe == "grpo_kl":  # TRL's reference log-probs: its "ref" adapter, as _generate_and_score_completions
                from trl.trainer.utils import use_adapter

                assert "ref" in model.peft_config, "TRL keeps no copy of the starting adapter"
                with use_adapter(model, adapter_name="ref"):
                    ref, _, _ = trainer._get_per_token_logps_and_entropies(
                        model, ids, mask, batch["completion_ids"].size(1)
                    )
                batch["ref_per_token_logps"] = ref
        batch["old_per_token_logps"] = old
    steps = []
    for _ in range(STEPS):
        loss = trainer._compute_loss(model, batch) if recipe.startswith("grpo") else trainer.compute_loss(model, batch)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        steps.append((float(loss.detach()), float(norm)))
    model.eval()
    probe = torch.tensor([PROBE])
    with torch.no_grad():
        logits = model(input_ids=probe).logits
        with model.disable_adapter():
            base = model(input_ids=probe).logits
    adapter = {k: v.detach().clone() for k, v in get_peft_model_state_dict(model).items()}
    return {"init": out / "init", "steps": steps, "adapter": adapter, "logits": logits, "base": base}


PARITY_TEST = "test_lora_steps_equal_the_transformers_engine_and_sync_only_the_adapter"


def _parity_cases(selected_params: list[tuple[str, dict]]) -> set[tuple[str, int]]:
    """The ``(recipe, tp)`` cases of the parity test this session runs (only those, under ``-k``)."""
    return {(params["recipe"], params["tp"]) for test, params in selected_params if test == PARITY_TEST}


@pytest.fixture(scope="module")
def references(tiny, teacher, batches, selected_params, tmp_path_factory) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("transformers")
    recipes = sorted({recipe for recipe, _ in _parity_cases(selected_params)})
    return {r: _reference(r, tiny, teacher, batches[r.removesuffix("_kl")], root / r) for r in recipes}


def _plan_megatron_steps(cli_runs, tiny: Path, teacher: Path, cases: list[tuple[str, Path, Path]], out: Path,
                         tp: int) -> dict[str, Path]:  # fmt: skip
    """Plan this engine's loop with LoRA on ``tp`` ranks (:data:`MEGATRON_STEPS`) for each ``(recipe, peft init,
    batch file)`` of ``cases``, all in one run (key ``("parity", tp)``, in the world of this module's runs of that
    size); ``{recipe: its result file}``."""
    out.mkdir(parents=True, exist_ok=True)
    script = out / "steps.py"
    script.write_text(MEGATRON_STEPS)
    results = {recipe: out / recipe / "steps.json" for recipe, _, _ in cases}
    for result in results.values():
        result.parent.mkdir(exist_ok=True)
    cases_file = out / "cases.json"
    cases_file.write_text(json.dumps([[r, str(init), str(batch), str(results[r])] for r, init, batch in cases]))
    argv = [tiny, teacher, cases_file, LR, STEPS, RANK, ALPHA, json.dumps(PROBE), KL_BETA]
    cli_runs.plan_script(("parity", tp), script, argv, out, ranks=tp, group="lora")
    return results


@pytest.fixture(scope="module")
def planned(cli_runs, selected_params, tiny, request, tmp_path_factory) -> dict[int, dict[str, Path]]:
    """Plans, with conftest's ``CliRuns``, what the selected tests ask for: the ``swiftcore train`` runs of
    :data:`CLI_RUNS` (TP1) and, for each TP size of the selected parity cases, one run of :data:`MEGATRON_STEPS` for
    all of them (from the references' peft inits); those of one size run together (the TP1 ones in one process, the
    TP2 one in a torchrun world of 2) when the first is asked for. ``{tp: {recipe: the parity result file}}``."""
    root = tmp_path_factory.mktemp("runs")
    for test, _ in selected_params:
        for key, options in CLI_RUNS.get(test, {}).items():
            cli_runs.plan(key, _grpo_lora_args(tiny, root / key, **options), root / key / "out", group="lora")
    cases = _parity_cases(selected_params)
    if not cases:
        return {}
    teacher, batches, references = (request.getfixturevalue(f) for f in ("teacher", "batches", "references"))
    planned = {}
    for tp in sorted({n for _, n in cases}):
        recipes = sorted(r for r, n in cases if n == tp)
        work = [(r, references[r]["init"], batches[r.removesuffix("_kl")]) for r in recipes]
        planned[tp] = _plan_megatron_steps(cli_runs, tiny, teacher, work, root / f"tp{tp}", tp)
    return planned


@pytest.fixture(scope="module")
def megatron_steps(planned, cli_runs):
    """``megatron_steps(recipe, tp) -> results``: the selected parity cases of a TP size, all in one run of
    :data:`MEGATRON_STEPS` (:func:`_plan_megatron_steps`), made when the first of them is asked for: ``{"steps",
    "sent", "sync_bytes"} and, from rank 0's rollout engine, "adapter" and "logits"``."""
    import torch

    def get(recipe: str, tp: int) -> dict:
        cli_runs.get(("parity", tp))  # a failure is reported to each case of this world, which runs once
        result = planned[tp][recipe]
        return {**json.loads(result.read_text()), **torch.load(result.with_suffix(".pt"))}

    return get


@pytest.mark.slow
@pytest.mark.parametrize("tp", [1, 2], ids=["tp1", "tp2"])
@pytest.mark.parametrize("recipe", ["grpo", "gkd", "grpo_kl"])
def test_lora_steps_equal_the_transformers_engine_and_sync_only_the_adapter(recipe, tp, references, megatron_steps):
    import torch

    want = references[recipe]
    ran = megatron_steps(recipe, tp)
    got, expected = ran["steps"], want["steps"]
    print(f"{recipe} lora tp{tp}: transformers {expected}\n megatron {got}\n sync bytes {ran['sync_bytes']}")
    assert len(got) == STEPS
    for step, ((loss, norm), (want_loss, want_norm)) in enumerate(zip(got, expected, strict=True), start=1):
        assert loss == pytest.approx(want_loss, rel=1e-5, abs=1e-5), (step, got, expected)
        assert norm == pytest.approx(want_norm, rel=1e-5, abs=1e-5), (step, got, expected)
    assert abs(expected[-1][0] - expected[0][0]) > 1e-4 and expected[-1][1] > 0, "the losses and gradients must move"

    # The sync: one adapter load, then only the adapter's tensors, by peft's names, at every sync.
    adapter_names = sorted(want["adapter"])
    assert adapter_names and all(".lora_A." in n or ".lora_B." in n for n in adapter_names), adapter_names[:4]
    calls = [call[0] for call in ran["sent"]]
    assert calls == ["load_adapter"] + ["update_adapter"] * (STEPS + 1), calls
    assert ran["sent"][0][2] == [RANK, ALPHA], ran["sent"][0]
    assert ran["sent"][0][1] == adapter_names, sorted(set(ran["sent"][0][1]) ^ set(adapter_names))[:5]
    for _, names, _ in ran["sent"][1:]:
        assert names == adapter_names, sorted(set(names) ^ set(adapter_names))[:5]
    adapter_bytes = sum(t.numel() * t.element_size() for t in want["adapter"].values())
    assert ran["sync_bytes"] == [float(adapter_bytes)] * (STEPS + 1), (ran["sync_bytes"], adapter_bytes)

    # What the engine holds after the last sync: the policy's adapter, and so its outputs.
    engine_adapter = ran["adapter"]
    assert sorted(engine_adapter) == adapter_names
    for name in adapter_names:
        assert float((engine_adapter[name] - want["adapter"][name]).abs().max()) < 1e-5, name
    assert float((want["logits"] - want["base"]).abs().max()) > 1e-4, "the adapter changed nothing: proves nothing"
    assert torch.allclose(ran["logits"], want["logits"], atol=1e-5, rtol=1e-5), float(
        (ran["logits"] - want["logits"]).abs().max()
    )


# ---------------------------------------------------------------------------------------------- end to end

VOWEL = r"format.pattern=^\s*[aeiouAEIOU]"


def _grpo_lora_args(tiny: Path, work: Path, *, prompts: int, steps: int, lr: float, rank: int, alpha: int,
                    generations: int) -> list[str]:  # fmt: skip
    """What follows ``swiftcore`` for ``swiftcore train --engine megatron --recipe grpo --tuner lora`` on the vowel
    task (``prompts`` prompts, 2 a step, ``generations`` completions of up to 4 tokens, constant ``lr``, seed 0),
    writing ``work/out``."""
    work.mkdir(parents=True, exist_ok=True)
    data = work / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Write a word, number {i}."}) + "\n" for i in range(prompts)))
    return ["train", "--engine", "megatron", "--recipe", "grpo", "--model", str(tiny), "--dataset", str(data),
            "--output-dir", str(work / "out"), "--tuner", "lora", "--lora-rank", str(rank), "--lora-alpha", str(alpha),
            "--learning-rate", str(lr), "--lr-scheduler", "constant", "--max-steps", str(steps), "--batch-size", "2",
            "--logging-steps", "1", "--save-steps", "1000", "--seed", "0", "--no-plot", "--reward", "format",
            "--reward-option", VOWEL, "--num-generations", str(generations), "--max-completion-length", "4",
            "--rollout-engine", "transformers"]  # fmt: skip


#: The ``swiftcore train`` runs each test asks for (all on one process): key -> :func:`_grpo_lora_args`' options.
CLI_RUNS = {
    "test_a_grpo_lora_run_syncs_the_adapter_every_step_and_saves_it": {
        "sync": {"prompts": 8, "steps": 3, "lr": 1e-3, "rank": RANK, "alpha": ALPHA, "generations": 4},
    },
    "test_grpo_lora_raises_the_held_out_reward_on_the_toy_task": {
        "learn": {"prompts": 16, "steps": LEARN_STEPS, "lr": LEARN_LR, "rank": 8, "alpha": 32, "generations": 8},
    },
}


@pytest.fixture(scope="module")
def lora_runs(planned, cli_runs):
    """``lora_runs(key) -> output directory``: this module's ``swiftcore train`` runs (:data:`CLI_RUNS`, planned by
    :func:`planned`: one process, with the TP1 parity script) made when the first is asked for."""
    return cli_runs.get


@pytest.mark.slow
def test_a_grpo_lora_run_syncs_the_adapter_every_step_and_saves_it(tiny, lora_runs):
    """3 steps through ``swiftcore train`` (2 prompts a step, 4 completions of up to 4 tokens, rank 4)."""
    from safetensors.torch import load_file

    out = lora_runs("sync")
    logs = [json.loads(line) for line in (out / "logs.jsonl").read_text().splitlines() if '"loss"' in line]
    adapter_file = out / "checkpoint-3" / "adapter_model.safetensors"
    saved = load_file(adapter_file)
    adapter_bytes = sum(t.numel() * t.element_size() for t in saved.values())
    full_bytes = sum(t.numel() * t.element_size() for t in load_file(tiny / "model.safetensors").values())
    synced = [r["sync_bytes"] for r in logs]
    print(f"grpo.megatron lora: sync bytes per step {synced} (the full weights: {full_bytes}), sync seconds "
          f"{[round(r['sync_s'], 4) for r in logs]}")  # fmt: skip
    assert len(logs) == 3 and synced == [float(adapter_bytes)] * 3, (synced, adapter_bytes)
    assert adapter_bytes < full_bytes / 5
    config = json.loads((out / "checkpoint-3" / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"]) == (RANK, ALPHA)
    assert json.loads((out / "args.json").read_text())["grpo"]["num_generations"] == 4


def _mean_reward(model_dir: Path, prompts: list[str], adapter: Path | None, samples: int = 8) -> float:
    """The mean vowel reward of ``samples`` sampled replies (temperature 1, seed 0) to each prompt, generated by the
    transformers backend from ``model_dir``, with the peft ``adapter`` loaded and used when given."""
    import re

    import torch
    from swiftcore_infer import Request, SamplingParams, create_engine

    import swiftcore.api

    torch.manual_seed(0)
    engine = create_engine("transformers", str(model_dir), swiftcore.api.load_plugins(env={}), template="qwen3_5",
                           device="cpu")  # fmt: skip
    try:
        if adapter is not None:
            engine.load_adapter("trained", adapter)
        sampling = SamplingParams(max_new_tokens=4, temperature=1.0)
        requests = [Request(record={"messages": [{"role": "user", "content": p}]}, sampling=sampling,
                            adapter="trained" if adapter is not None else None)
                    for p in prompts for _ in range(samples)]  # fmt: skip
        texts = [g.text for g, _ in engine.generate_rollouts(requests)]
    finally:
        engine.close()
    return sum(bool(re.match(r"^\s*[aeiouAEIOU]", t)) for t in texts) / len(texts)


@pytest.mark.slow
def test_grpo_lora_raises_the_held_out_reward_on_the_toy_task(tiny, lora_runs):
    """The vowel task (a reply that starts with a vowel earns 1; 2 prompts x 8 completions of up to 4 tokens a step,
    rank 8, alpha 32, lr LEARN_LR): the rollouts (sampled with the synced adapter) earn more, and the saved adapter
    raises the mean reward on 8 held-out prompts over the base model's."""
    out = lora_runs("learn")
    steps = LEARN_STEPS
    logs = [json.loads(line) for line in (out / "logs.jsonl").read_text().splitlines() if '"loss"' in line]
    rewards = [r["rewards/format/mean"] for r in logs]
    held_out = [f"Write a word, item {i}." for i in range(8)]
    before = _mean_reward(tiny, held_out, None)
    after = _mean_reward(tiny, held_out, out / f"checkpoint-{steps}")
    print(f"grpo.megatron lora toy task: held-out mean reward {before:.3f} -> {after:.3f}; rollouts per step {rewards}")
    assert len(rewards) == steps and sum(rewards[-3:]) / 3 - rewards[0] >= 0.4, rewards
    assert after - before >= 0.4 and after >= 0.7, (before, after, rewards)


# ---------------------------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("recipe", ["grpo", "gkd"])
@pytest.mark.parametrize(
    ("family", "options", "expected"),
    [
        ("qwen3_5", {"recipe_options": {"pp": 2}}, "--pp 2 / --vpp 1: {R} does not run through pipeline stages"),
        ("qwen3_5", {"recipe_options": {"ep": 2}}, "--ep 2: {R} trains dense families only so far"),
        ("qwen3_5", {"recipe_options": {"rollout_engine": "vllm"}}, "--rollout-engine vllm: this engine generates"),
        ("qwen3_5", {"world": 3, "recipe_options": {"tp": 2}}, "world size 3 (processes launched) is not a multiple"),
        ("glm5_with_mtp", {}, "builds multi-token-prediction (MTP) layers"),
        (
            "olmoe",
            {},
            "--tuner lora: bridge 'olmoe' builds MoE layers, which {R} on this engine trains with --tuner full",
        ),
    ],
    ids=["pp", "ep", "vllm", "world", "mtp", "moe"],
)
def test_what_lora_rl_megatron_does_not_do_is_refused_first(
    recipe, family, options, expected, tiny_model_dir, tmp_path, monkeypatch, no_process_group_after, request
):
    """With ``--tuner lora`` the layouts and models the online loop does not run are still refused, by name and
    before any process group or output exists."""
    import re

    from swiftcore_train import TrainConfig, run_training

    from swiftcore._plugins import load_plugins
    from swiftcore.api import SwiftcoreError

    options = dict(options)
    if world := options.pop("world", None):
        monkeypatch.setenv("WORLD_SIZE", str(world))
    data = tmp_path / "prompts.jsonl"
    data.write_text(json.dumps({"prompt": "hi"}) + "\n")
    model = request.getfixturevalue(family) if family == "glm5_with_mtp" else tiny_model_dir(family)
    own = {"reward": ("format",)} if recipe == "grpo" else {"teacher_model": str(model)}
    cfg = TrainConfig(
        model=str(model), dataset=(str(data),), output_dir=str(tmp_path / "out"), engine="megatron", recipe=recipe,
        tuner="lora", max_steps=1, recipe_options={**own, **options.pop("recipe_options", {})},
    )  # fmt: skip
    with pytest.raises(SwiftcoreError, match=re.escape(expected.format(R=recipe.upper()))):
        run_training(cfg, load_plugins(env={}))
    assert not (tmp_path / "out").exists(), "nothing is written before the checks pass"
