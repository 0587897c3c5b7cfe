"""The ``grpo.megatron`` recipe: GRPO on megatron-core (``swiftcore train --engine megatron --recipe grpo``), read top
to bottom.

It is the ``grpo`` recipe of swiftcore-recipe-rl on this engine, with that recipe's own parts: its options
(``GRPOOptions``), its plan (``plan_run``: every check, the rewards loaded, the prompts encoded by the family's
template), its rewards (``TRLReward``), its colocated rollout engine and weight sync (``create_rollout_engine``,
``WeightSync``) and its loss, TRL's: :func:`grpo_loss` runs TRL 1.16's ``GRPOTrainer._compute_loss`` (every
``--grpo-loss-type`` the recipe maps to TRL, the clipping, the normalisation and the clip metrics) on a stand-in
trainer whose per-token log-probs are the megatron model's, as ``dpo.megatron`` runs TRL's DPO loss.

One optimiser step:

1. rank 0 generates ``--num-generations`` completions for each of the step's prompts (``--batch-size`` of each
   data-parallel replica) with the rollout engine (swiftcore's transformers backend in this process, on the policy's
   base checkpoint) and scores them with the ``--reward`` functions; the group advantages are TRL's
   (:func:`group_advantages`, over the whole round);
2. the rollouts go to every rank; each data-parallel replica takes the completions of its own prompts
   (:meth:`GRPOLoop.replica_batch`, as TRL hands each process its slice, the loss normalised as TRL normalises a
   process's share); each rank computes its share of those completions' per-token log-probs under the sharded
   model (logits divided by the rollout temperature, megatron's vocabulary-parallel cross entropy: tensor
   parallelism never gathers the logits) and the GRPO loss; backward, gradients reduced and clipped, optimiser step
   (the SFT loop's, :mod:`~swiftcore_train_megatron.loop`: gradients summed over the replicas);
3. the updated weights go to the rollout engine (from data-parallel replica 0's ranks; the others hold the same): the
   bridge's rules turn the sharded megatron tensors back into the Hugging Face tensors (:func:`hf_tensors`, gathered
   over the tensor-parallel ranks), named as the engine's transformers model names them (:func:`model_named_tensors`:
   a MoE layer's experts fused as transformers' loader fuses them), pushed in buckets by the recipe's
   :class:`WeightSync` (full weights). With ``--tuner lora`` (the engine's LoRA,
   :mod:`~swiftcore_train_megatron.lora`) only the adapter moves: its tensors, gathered over the tensor-parallel
   ranks and named as peft names them (:func:`adapter_tensors`), go to the engine's policy adapter through its
   ``update_adapter`` (attached by :meth:`WeightSync.attach` at the first sync, step 0, so the rollouts are always
   the adapter's, a trained ``--lora-init-adapter`` included); the base weights never move.

On a MoE family the loss also has TRL's ``router_aux_loss_coef * aux_loss`` of the policy's forward pass
(:class:`~swiftcore_train_megatron.engine.RouterAuxLoss` over the rows' real tokens, logged as ``aux_loss``).

The rollouts are on-policy (one generation round per step, ``--num-iterations 1``), so the old log-probs are the
current ones, detached, as in TRL without ``num_iterations``. Checkpoints are the SFT loop's (megatron shards and the
Hugging Face model, or with LoRA the peft adapter). :func:`prepare_rl_run` is the preamble ``gkd.megatron`` shares.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swiftcore_train import TrainConfig, TrainResult, is_main_process

from swiftcore.api import SwiftcoreError
from swiftcore_train_megatron.layout import ParallelLayout, world_size
from swiftcore_train_megatron.loop import TrainLoop

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = [
    "GRPOLoop",
    "RLRun",
    "adapter_tensors",
    "completion_logps",
    "completion_logps_and_aux",
    "completion_rows",
    "group_advantages",
    "grpo_loss",
    "hf_tensors",
    "load_reference",
    "model_named_tensors",
    "prepare_rl_run",
    "run_megatron_grpo",
]

log = logging.getLogger("swiftcore.train.megatron")

#: ``--grpo-loss-type`` -> TRL's ``(loss_type, importance_sampling_level)``, as the ``grpo`` recipe maps it
#: (``gspo``: TRL's per-sequence mean with the sequence-level ratio).
_TRL_LOSS = {"gspo": ("grpo", "sequence")}


def rl_options(cfg: TrainConfig, options_class: Any, recipe: str) -> Any:
    """The ``recipe`` recipe's options (an ``options_class`` of swiftcore-recipe-rl) from the flags this run was given
    (its defaults for the others)."""
    import dataclasses

    own = {f.name for f in dataclasses.fields(options_class)}
    try:
        return options_class(**{k: v for k, v in cfg.recipe_options.items() if k in own})
    except (TypeError, ValueError) as exc:
        raise SwiftcoreError(f"recipe '{recipe}.megatron': invalid options: {exc}") from exc


def rl_refusals(cfg: TrainConfig, options: Any, layout: ParallelLayout, world: int, name: str) -> list[str]:
    """What an online recipe on this engine (``name``: GRPO, GKD) does not do yet, each with what would work: the
    layouts and rollout places its loop (:class:`GRPOLoop`) does not run (both tuners run: ``full`` syncs
    the weights, ``lora`` only the adapter; data-parallel replicas run, ``world = --tp x replicas``, and a world
    that is no multiple of ``--tp`` is the layout's own refusal)."""
    problems = []
    if layout.pp > 1 or layout.vpp > 1:
        problems.append(f"--pp {layout.pp} / --vpp {layout.vpp}: {name} does not run through pipeline stages yet; "
                        "use --tp (and --pp 1)")  # fmt: skip
    if layout.ep > 1:
        problems.append(f"--ep {layout.ep}: {name} trains dense families only so far; use --ep 1")
    if layout.cp > 1:
        problems.append(f"--cp {layout.cp}: {name} does not split sequences yet; use --cp 1")
    if cfg.gradient_accumulation_steps != 1:
        problems.append(f"--gradient-accumulation-steps: {name} on this engine runs one generation round per step; "
                        "use 1 and raise --batch-size instead")  # fmt: skip
    if options.rollout_server:
        problems.append("--rollout-server: this engine generates with a colocated engine; drop --rollout-server")
    if options.rollout_engine not in ("trainer", "transformers"):
        problems.append(f"--rollout-engine {options.rollout_engine}: this engine generates with the transformers "
                        "backend in rank 0's process; use --rollout-engine transformers")  # fmt: skip
    return problems


def refuse_grpo(cfg: TrainConfig, options: Any, layout: ParallelLayout, world: int) -> None:
    """What ``grpo.megatron`` does not do yet, refused by name before anything loads (besides the engine's own).

    Raises:
        SwiftcoreError: every unsupported option, each with what would work.
    """
    problems = rl_refusals(cfg, options, layout, world, "GRPO")
    if options.ray:
        problems.append("--ray: GRPO on this engine runs its rollouts in rank 0's process; drop --ray")
    if options.environment:
        problems.append("--environment: multi-turn episodes are not supported on this engine yet; drop it, or run "
                        "--recipe grpo on the default engine (drop --engine)")  # fmt: skip
    if options.num_iterations != 1:
        problems.append("--num-iterations: GRPO on this engine is on-policy (one update per round); use 1")
    if options.async_rollouts or options.importance_sampling_mode() is not None:
        problems.append("--async-rollouts / --rollout-importance-sampling: not supported on this engine yet; the "
                        "rollouts are on-policy, leave them off")  # fmt: skip
    if options.grpo_loss_type == "fipo" or options.dynamic_sampling or options.chord_dataset:
        problems.append("--grpo-loss-type fipo / --dynamic-sampling / --chord-dataset: not supported on this engine "
                        "yet; run them on the default engine (drop --engine)")  # fmt: skip
    if options.overlong_buffer:
        problems.append("--overlong-buffer: not supported on this engine yet; use 0")
    if problems:
        raise SwiftcoreError("--engine megatron --recipe grpo:\n  " + "\n  ".join(problems))


def refuse_model(bridge: Any, bridge_spec: Any, recipe: str, tuner: str = "full") -> None:
    """Refuse a bridge with multi-token-prediction layers, whose loss megatron adds to the gradients and which
    ``recipe`` (grpo, gkd) on the transformers engine does not train, and MoE families with ``--tuner lora`` (not
    compared with the transformers engine yet). MoE families train in full (at ``--pp 1 --ep 1``, which
    :func:`rl_refusals` asks of every model): GRPO adds TRL's router load-balancing loss (:class:`GRPOLoop`), GKD none,
    as TRL's ``DistillationTrainer``."""
    if any(rule.mcore.startswith("mtp.") for rule in bridge.rules()):
        raise SwiftcoreError(
            f"--engine megatron --recipe {recipe}: bridge {bridge_spec.name!r} builds multi-token-prediction (MTP) "
            f"layers, whose loss {recipe.upper()} on this engine does not add yet; train a family without MTP "
            f"layers, or run --recipe {recipe} on the default engine (drop --engine)"
        )
    if tuner == "lora" and bridge.num_experts() > 0:
        raise SwiftcoreError(
            f"--engine megatron --recipe {recipe} --tuner lora: bridge {bridge_spec.name!r} builds MoE layers, which "
            f"{recipe.upper()} on this engine trains with --tuner full so far (its LoRA on MoE families is not "
            f"compared with the transformers engine yet); use --tuner full, or run --recipe {recipe} --tuner lora on "
            "the default engine (drop --engine)"
        )


@dataclass
class RLRun:
    """What :func:`prepare_rl_run` made ready for an online recipe's loop: every check passed, the process group, the
    sharded model (with its LoRA under ``--tuner lora``), its optimiser and schedule.

    Attributes:
        recipe: ``grpo`` or ``gkd``.
        plan: the swiftcore-recipe-rl recipe's plan (``plan_run``: spec, template, prompts, rewards or teacher).
        options: the recipe's options.
        lora: ``(LoraSettings, adapted layers)`` with ``--tuner lora``, else None.
    """

    cfg: TrainConfig
    recipe: str
    plan: Any
    options: Any
    layout: ParallelLayout
    world: int
    bridge_spec: Any
    bridge: Any
    output_dir: Path
    model: Any
    lora: Any
    schedule: Any
    optimizer: Any
    scheduler: Any
    #: The checkpoint ``--resume-from-checkpoint`` names (checked: this recipe's, at this layout), else None.
    resume: Path | None = None

    def loop(self, loop_class: type[GRPOLoop], plugins: PluginSet, **record: Any) -> GRPOLoop:
        """Record the run (``args.json``, with ``record`` under the recipe's own keys) and build its loop of
        ``loop_class`` (:class:`GRPOLoop` or a subclass) over the plan's prompts; a resumed run's loop continues
        from its checkpoint (weights, optimizer, schedule, RNG and log; the rollouts of a step are sampled under
        ``--seed`` and the step, and the engine gets the checkpoint's weights at the first sync, so the steps after
        it are the uninterrupted run's)."""
        from dataclasses import asdict

        from swiftcore_train import start_run

        from swiftcore_train_megatron.recipe import _resumed_step

        cfg, layout = self.cfg, self.layout
        args_record = start_run(
            cfg, self.output_dir, self.plan.spec, plugins, fresh=self.resume is None,
            resumed_step=_resumed_step(self.resume), template=self.plan.template,
            engine=layout.record(self.world, self.bridge_spec.name),
            **record, **{self.recipe: asdict(self.options)},
        )  # fmt: skip
        tokenizer = self.plan.local.codec.tokenizer
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
        loop = loop_class(
            cfg=cfg, output_dir=self.output_dir, model=self.model, optimizer=self.optimizer, scheduler=self.scheduler,
            schedule=self.schedule, train_samples=self.plan.prompts.dataset, val_samples=[], pad_token_id=pad_id,
            bridge=self.bridge, bridge_name=self.bridge_spec.name, layout=layout,
            extras={"swiftcore_args.json": json.dumps(args_record, indent=2)}, lora=self.lora, options=self.options,
        )  # fmt: skip
        if self.resume is not None:
            loop.resume(self.resume)
        return loop


def prepare_rl_run(
    cfg: TrainConfig, plugins: PluginSet, layout: ParallelLayout, recipe: str, options_class: Any, refuse: Any
) -> RLRun:
    """The preamble ``grpo.megatron`` and ``gkd.megatron`` share: the options (``options_class``), every check before
    any process group (the engine's, ``refuse(cfg, options, layout, world)``, the recipe's plan, the bridge, MoE/MTP,
    the layout, the checkpoint to resume), the output directory; then the process group, the sharded model, LoRA
    (``--tuner lora``, ``--lora-init-adapter``), the optimiser and schedule.

    Raises:
        SwiftcoreError: the first check that fails, naming what would work.
    """
    from swiftcore_recipe_rl import plan_run

    from swiftcore_train_megatron.recipe import (
        _add_lora,
        _bridge,
        _refuse_unsupported,
        _schedule_and_optimizer,
        resume_checkpoint,
    )

    cfg.validate()
    _refuse_unsupported(cfg)
    options = rl_options(cfg, options_class, recipe)
    world = world_size()
    refuse(cfg, options, layout, world)
    plan = plan_run(recipe, cfg, plugins, options)
    bridge_spec, bridge = _bridge(cfg, plan.spec, plugins)
    refuse_model(bridge, bridge_spec, recipe, cfg.tuner)
    layout.check(bridge, bridge_spec, world)
    output_dir = Path(cfg.output_dir)
    resume = resume_checkpoint(cfg, output_dir, plan.spec, layout)
    if is_main_process():
        from swiftcore_train import plan_output_dir, run_inputs

        plan_output_dir(
            output_dir, resume=resume is not None, overwrite=cfg.overwrite_output_dir, inputs=run_inputs(cfg)
        )
    log.info("%s: model %s, bridge %s, tp %d, tuner %s, %d prompts", recipe, plan.spec.name, bridge_spec.name,
             layout.tp, cfg.tuner, len(plan.prompts.dataset))  # fmt: skip

    # Every check passed: only now the process group and the model.
    from swiftcore_megatron import init_model_parallel

    from swiftcore_train_megatron.engine import load_sharded_model

    init_model_parallel(layout.tp, layout.ep, seed=cfg.seed)
    model = load_sharded_model(bridge, cfg.model, tp=layout.tp, ep=layout.ep)
    lora = _add_lora(cfg, plan.spec, bridge, model) if cfg.tuner == "lora" else None
    schedule, optimizer, scheduler = _schedule_and_optimizer(
        cfg, output_dir, model, len(plan.prompts.dataset), layout, world
    )
    return RLRun(
        cfg=cfg, recipe=recipe, plan=plan, options=options, layout=layout, world=world, bridge_spec=bridge_spec,
        bridge=bridge, output_dir=output_dir, model=model, lora=lora, schedule=schedule, optimizer=optimizer,
        scheduler=scheduler, resume=resume,
    )  # fmt: skip


def run_megatron_grpo(cfg: TrainConfig, plugins: PluginSet, layout: ParallelLayout) -> TrainResult:
    """GRPO-train ``cfg.model`` on ``cfg.dataset``'s prompts with megatron-core (see ``swiftcore train --help``).

    Returns:
        :class:`~swiftcore_train.config.TrainResult`; each ``checkpoint-N`` is a Hugging Face model and the megatron
        shards, as ``sft.megatron`` saves them (with ``--tuner lora``: the peft adapter and the LoRA shards).
    """
    from swiftcore_recipe_rl import GRPOOptions

    run = prepare_rl_run(cfg, plugins, layout, "grpo", GRPOOptions, refuse_grpo)
    log.info("grpo: %d generations per prompt", run.options.num_generations)
    rewards = [{"name": r.name, "provider": str(r.spec.provider), "options": r.options} for r in run.plan.rewards]
    loop = run.loop(GRPOLoop, plugins, rewards=rewards)
    if run.options.grpo_beta:
        loop.attach_reference(load_reference(cfg, run.plan.spec, run.bridge, layout))
    if is_main_process():
        loop.attach_rollouts(run.plan, plugins)
    try:
        return loop.run()
    finally:
        loop.close()


def load_reference(cfg: TrainConfig, spec: Any, bridge: Any, layout: ParallelLayout) -> Any:
    """TRL's reference model of ``--grpo-beta``, sharded as the policy is (every rank; frozen by
    :meth:`GRPOLoop.attach_reference`): the policy as the run starts. A full run's is a copy of ``--model``; a LoRA
    run's is the base with ``--lora-init-adapter`` when one is given (TRL copies a peft policy's starting adapter into a
    frozen ``ref`` adapter), else the base (TRL switches a new adapter off, and a new adapter, ``lora_B`` zero, changes
    nothing)."""
    from swiftcore_train_megatron.engine import load_sharded_model
    from swiftcore_train_megatron.recipe import _add_lora

    model = load_sharded_model(bridge, cfg.model, tp=layout.tp, ep=layout.ep)
    if cfg.tuner == "lora" and cfg.recipe_options.get("lora_init_adapter"):
        _add_lora(cfg, spec, bridge, model)  # the adapter's layers, loaded from --lora-init-adapter
    return model


# ---------------------------------------------------------------------------------------------- the loss's parts


def group_advantages(rewards_per_func: Any, weights: Any, num_generations: int, scale_rewards: str) -> Any:
    """GRPO's advantages ``(B,)`` of ``B`` completions in groups of ``num_generations`` consecutive rows, as TRL 1.16's
    ``GRPOTrainer`` computes them (``multi_objective_aggregation="sum_then_normalize"``, its default)::

        r_i = sum_k w_k r_ik;   A_i = (r_i - mean_group(r)) / (std + 1e-4)

    ``std`` is the group's (``scale_rewards="group"``), the batch's (``"batch"``), or none (``"none"``: no division);
    both are the unbiased, NaN-aware standard deviation. A completion no reward could score (all NaN) is left out of
    its group's statistics and gets advantage 0.

    Args:
        rewards_per_func: ``(B, K)`` float tensor, each reward function's score (NaN: not scored).
        weights: ``(K,)`` the reward weights.
        num_generations: the group size.
        scale_rewards: ``group``, ``batch`` or ``none``.
    """
    import torch
    from trl.trainer.utils import nanstd

    unscorable = torch.isnan(rewards_per_func).all(dim=1)
    rewards = (rewards_per_func * weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
    rewards[unscorable] = torch.nan
    grouped = rewards.view(-1, num_generations)
    mean = torch.nanmean(grouped, dim=1).repeat_interleave(num_generations)
    if scale_rewards == "batch":
        std = nanstd(rewards).expand_as(rewards) if rewards.numel() > 1 else torch.zeros_like(rewards)
    elif num_generations > 1:
        std = nanstd(grouped, dim=1).repeat_interleave(num_generations)
    else:
        std = torch.zeros_like(rewards)
    advantages = rewards - mean
    if scale_rewards != "none":
        advantages = advantages / (std + 1e-4)
    return torch.nan_to_num(advantages, nan=0.0)


def completion_rows(batch: dict[str, Any], multiple: int = 1) -> tuple[Any, Any, Any]:
    """``(input_ids (B, S), attention_mask (B, S), index (B, C))`` of TRL's rollout ``batch``: each row as its real
    prompt tokens then its completion from position 0, right-padded to a length ``S`` that is a multiple of
    ``multiple`` (the tensor-parallel size under sequence parallelism), and the positions whose logits predict the
    completion's tokens. ``attention_mask`` is 1 on the prompt's tokens and the completion's under its mask: the
    tokens TRL's forward attends to (and routes through a MoE model's load-balancing loss)."""
    import torch

    prompt_ids, prompt_mask = batch["prompt_ids"], batch["prompt_mask"].bool()
    completion_ids, completion_mask = batch["completion_ids"], batch["completion_mask"]
    rows, width = completion_ids.shape
    prompts = [prompt_ids[i][prompt_mask[i]].cpu() for i in range(rows)]
    length = -(-(max(len(p) for p in prompts) + width) // multiple) * multiple
    input_ids = torch.zeros(rows, length, dtype=torch.long)
    attention_mask = torch.zeros(rows, length, dtype=torch.long)
    for i, p in enumerate(prompts):
        input_ids[i, : len(p) + width] = torch.cat([p, completion_ids[i].cpu()])
        attention_mask[i, : len(p) + int(completion_mask[i].sum())] = 1
    index = torch.stack([torch.arange(width) + len(p) - 1 for p in prompts])
    return input_ids, attention_mask, index


def completion_logps(model: Any, batch: dict[str, Any], temperature: float = 1.0) -> Any:
    """The megatron model's per-token log-probs ``(B, C)`` of ``batch``'s completions, as TRL's GRPO computes them
    (logits divided by ``temperature``, log-softmax over the whole vocabulary), with gradient
    (:func:`completion_logps_and_aux` without the router loss)."""
    return completion_logps_and_aux(model, batch, temperature)[0]


def completion_logps_and_aux(model: Any, batch: dict[str, Any], temperature: float = 1.0, aux: Any = None) -> Any:
    """``(logps, aux_loss)``: the megatron model's per-token log-probs ``(B, C)`` of ``batch``'s completions, as TRL's
    GRPO computes them (logits divided by ``temperature``, log-softmax over the whole vocabulary), with gradient; and
    with ``aux`` (a MoE model's :class:`~swiftcore_train_megatron.engine.RouterAuxLoss`) the router load-balancing loss
    of the same forward pass over the rows' real tokens, as TRL's GRPO asks the model for it (else None).

    ``batch`` is TRL's layout: ``prompt_ids``/``prompt_mask`` ``(B, P)`` left-padded, ``completion_ids`` ``(B, C)``
    right-padded. Each row runs as :func:`completion_rows` lays it out (megatron's rotary reads no position ids, and
    a left pad would be attended to: it has no attention mask here); under tensor parallelism every rank holds its
    slice of the vocabulary and megatron's vocabulary-parallel cross entropy forms the log-softmax without gathering
    the logits. Positions past a completion's end score padding: 0 is returned there under the mask the loss applies.
    """
    import contextlib

    import torch
    from megatron.core import tensor_parallel
    from swiftcore_megatron import eager_on_cpu

    from swiftcore_train_megatron.engine import sequence_parallel_length

    # Rows padded to a multiple of the TP size where the model runs sequence parallel (the rounding of length 1).
    input_ids, attention_mask, index = completion_rows(batch, sequence_parallel_length(model, 1))
    positions = torch.arange(input_ids.shape[1]).unsqueeze(0).expand(input_ids.shape[0], -1)
    device = next(model.parameters()).device
    input_ids, positions, index = input_ids.to(device), positions.to(device), index.to(device)
    with eager_on_cpu(), aux.recording() if aux is not None else contextlib.nullcontext() as recorded:
        logits = model(input_ids=input_ids, position_ids=positions, attention_mask=None)  # (B, S, V / tp)
    labels = torch.zeros_like(input_ids)
    labels[:, :-1] = input_ids[:, 1:]
    logits = logits.float() / temperature
    # (B, S): at position t the log-prob of token t+1
    per_token = -tensor_parallel.vocab_parallel_cross_entropy(logits.contiguous(), labels.contiguous())
    aux_loss = aux.loss(recorded, attention_mask.bool().to(device)) if aux is not None else None
    return per_token.gather(1, index), aux_loss


class _Gather:
    """What TRL's loss asks of accelerate, over ``group`` (the data-parallel replicas, each one of TRL's processes;
    None: one process, this rank's batch is the whole batch): the process count, ``gather`` (each process's tensor,
    concatenated in rank order, as accelerate's) and ``reduce`` (summed), for TRL's normaliser and its metrics."""

    sync_gradients = True

    def __init__(self, group: Any = None) -> None:
        import torch.distributed as dist

        self.group = group
        self.num_processes = 1 if group is None else dist.get_world_size(group)

    def gather(self, tensor: Any) -> Any:
        """Every process's ``tensor`` (a scalar or ``(B, ...)``; ``B`` may differ), concatenated along dim 0."""
        if self.num_processes == 1:
            return tensor
        import torch
        import torch.distributed as dist

        parts: list[Any] = [None] * self.num_processes
        dist.all_gather_object(parts, tensor.detach().cpu(), group=self.group)
        return torch.cat([p.reshape(-1) if p.dim() == 0 else p for p in parts]).to(tensor.device)

    gather_for_metrics = gather

    def reduce(self, tensor: Any, reduction: str = "sum") -> Any:
        """``tensor`` summed over the processes (a copy; TRL asks only for sums)."""
        if self.num_processes == 1:
            return tensor
        import torch.distributed as dist

        total = tensor.detach().clone()
        dist.all_reduce(total, group=self.group)
        return total


def grpo_loss(
    per_token_logps: Any,
    batch: dict[str, Any],
    options: Any,
    *,
    max_completion_length: int,
    training: bool = True,
    data_parallel: Any = None,
) -> tuple[Any, dict[str, float]]:
    """TRL 1.16's GRPO loss (``GRPOTrainer._compute_loss``) of one batch of rollouts, from the policy's log-probs.

    The method runs on a stand-in trainer that holds the ``grpo`` recipe's loss options (``--grpo-loss-type``,
    ``--grpo-epsilon``/``-high``, ``--grpo-delta``, the SAPO temperatures) and hands it ``per_token_logps`` where TRL
    would run the model, so both engines train with one definition of the loss. The stand-in fixes what this engine
    fixes: on-policy rollouts unless the batch carries old log-probs, TRL's KL term to the reference when
    ``--grpo-beta`` is set (its ``k3`` estimate from the batch's reference log-probs, times the importance ratio as
    TRL's default ``use_bias_correction_kl`` has it), no entropy mask or bonus, no
    importance-sampling correction and no gradient accumulation (the caller scales). Under ``data_parallel`` (the
    process group of the data-parallel replicas) each replica is one of TRL's processes: ``batch`` is this replica's
    slice of the round, its ``num_items_in_batch`` the whole round's, and the loss TRL's of this process (whose
    gradient TRL's DDP averages over the processes: the caller divides by their count before summing gradients).

    Args:
        per_token_logps: ``(B, C)`` the policy's log-probs of the completion tokens (the gradient flows through it).
        batch: TRL's rollout batch: ``completion_mask`` ``(B, C)``, ``advantages`` ``(B,)``, for the
            ``dapo``/``cispo`` normaliser ``num_items_in_batch`` (the batch's completion tokens; default: counted), and
            ``old_per_token_logps`` ``(B, C)`` when the rollouts were sampled by other weights than these (default:
            on-policy, the ratio is 1); with ``--grpo-beta``, ``ref_per_token_logps`` ``(B, C)``, the reference
            model's log-probs of the same tokens.
        options: the ``grpo`` recipe's ``GRPOOptions``.
        max_completion_length: ``--max-completion-length`` (the ``dr_grpo`` normaliser).
        training: TRL's train / eval mode (only the metrics' bookkeeping differs).
        data_parallel: the data-parallel process group (None: one process); TRL's normaliser and metrics span it.

    Returns:
        ``(loss, metrics)``: the batch's loss and TRL's clip metrics of it (``clip_ratio/*``; ``kl`` with
        ``--grpo-beta``).
    """
    import dataclasses
    from collections import defaultdict
    from types import SimpleNamespace

    import torch
    from trl import GRPOConfig, GRPOTrainer

    # TRL's default, which the grpo recipe keeps: the KL term times the importance ratio (DeepSeek-V3.2's unbiased
    # reverse-KL gradient), also in the logged kl.
    bias_corrected_kl = {f.name: f for f in dataclasses.fields(GRPOConfig)}["use_bias_correction_kl"].default
    loss_type, level = _TRL_LOSS.get(options.grpo_loss_type, (options.grpo_loss_type, "token"))
    beta = float(options.grpo_beta)
    if beta and batch.get("ref_per_token_logps") is None:
        raise SwiftcoreError("grpo_loss: --grpo-beta needs the batch's reference log-probs (ref_per_token_logps)")
    mask = batch["completion_mask"]
    inputs = {
        "prompt_ids": batch.get("prompt_ids", torch.zeros(mask.shape[0], 0, dtype=torch.long)),
        "prompt_mask": batch.get("prompt_mask", torch.zeros(mask.shape[0], 0, dtype=torch.long)),
        "completion_ids": batch.get("completion_ids", torch.zeros_like(mask, dtype=torch.long)),
        "completion_mask": mask,
        "advantages": batch["advantages"],
        "num_items_in_batch": batch.get("num_items_in_batch", mask.sum()),
        "old_per_token_logps": batch.get("old_per_token_logps"),
        "ref_per_token_logps": batch.get("ref_per_token_logps"),
    }
    stand_in = SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *a, **k: (per_token_logps, torch.zeros_like(per_token_logps), None),
        aux_loss_enabled=False,
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        importance_sampling_level=level,
        beta=beta,
        loss_type=loss_type,
        epsilon_low=options.grpo_epsilon,
        epsilon_high=options.grpo_epsilon_high if options.grpo_epsilon_high is not None else options.grpo_epsilon,
        max_completion_length=max_completion_length,
        args=SimpleNamespace(
            delta=options.grpo_delta,
            use_bias_correction_kl=bias_corrected_kl,
            steps_per_generation=1,
            sapo_temperature_pos=options.sapo_temperature_pos,
            sapo_temperature_neg=options.sapo_temperature_neg,
        ),
        use_vllm=False,
        vllm_importance_sampling_correction=False,
        _entropy_bonus_enabled=False,
        model=SimpleNamespace(training=training),
        current_gradient_accumulation_steps=1,
        accelerator=_Gather(data_parallel),
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
    )
    loss = GRPOTrainer._compute_loss(stand_in, None, inputs)
    logged = stand_in._metrics["train" if training else "eval"]
    return loss, {k: v[-1] for k, v in logged.items() if k.startswith(("clip_ratio/", "cispo_")) or k == "kl"}


# ---------------------------------------------------------------------------------------------- the weight sync


def hf_tensors(model: Any, bridge: Any) -> dict[str, Any]:
    """The megatron model's weights as the Hugging Face checkpoint names them (the bridge's rules run backwards),
    each tensor whole: sharded tensors are gathered over the tensor-parallel ranks (collective: every rank of the
    group calls it, every rank gets the whole set). Tied tensors are given once; tensors the bridge carries past
    megatron (passthrough) are not the model's and are not included."""
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state

    group = parallel_state.get_tensor_model_parallel_group()
    tp = dist.get_world_size(group)
    # A MoE layer's experts are megatron's local experts 0..n-1 (the online recipes refuse --ep: every rank has all).
    local_experts = max(1, bridge.num_experts() // parallel_state.get_expert_model_parallel_world_size())
    state = model.state_dict()
    out: dict[str, Any] = {}
    with torch.no_grad():
        for rule in bridge.rules():
            local = state[rule.mcore_key(local_experts)].detach()
            if tp > 1 and rule.shard.dim is not None:
                shards = [torch.empty_like(local) for _ in range(tp)]
                dist.all_gather(shards, local.contiguous(), group=group)
                full = rule.shard.merge(shards, what=rule.mcore)
            else:
                full = local
            for key, tensor in zip(rule.hf, rule.fuse.to_hf(full), strict=True):
                out.setdefault(key, tensor.contiguous())
    return out


def model_named_tensors(tensors: dict[str, Any], spec: Any, model_dir: str | Path) -> dict[str, Any]:
    """``tensors`` (:func:`hf_tensors`: the Hugging Face *checkpoint*'s names) under the names of the transformers
    model the rollout engine holds (what its ``update_weights`` takes), converted as transformers' own loader converts
    a checkpoint (its ``get_model_conversion_mapping``: e.g. a MoE layer's per-expert ``experts.N.gate_proj`` /
    ``up_proj`` / ``down_proj`` checkpoint tensors merged into the model's fused ``experts.gate_up_proj`` /
    ``down_proj``). Loaded into a shell of the model's class on the meta device (no memory for the weights it does
    not get); tensors transformers does not map are given under their own names, for the engine to accept or refuse.
    """
    import torch
    from transformers import AutoConfig
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import convert_and_load_state_dict_in_model
    from transformers.modeling_utils import LoadStateDictConfig
    from transformers.utils import logging as hf_logging

    from swiftcore.api.models import model_class_for, read_hf_config

    cls = model_class_for(spec, read_hf_config(str(model_dir)))
    dtype = next(iter(tensors.values())).dtype
    with torch.device("meta"):
        shell = cls._from_config(AutoConfig.from_pretrained(str(model_dir)), dtype=dtype)
    mapping = get_model_conversion_mapping(shell)
    if not mapping:
        return tensors
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # one "Loading weights" bar a step would bury the run's own
    try:
        info, _ = convert_and_load_state_dict_in_model(
            shell, dict(tensors), LoadStateDictConfig(weight_mapping=mapping, dtype=dtype)
        )
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    out: dict[str, Any] = {}
    sent: set[int] = set()
    for name, tensor in shell.state_dict().items():  # a tied weight once, as hf_tensors gives it
        if not tensor.is_meta and tensor.data_ptr() not in sent:
            sent.add(tensor.data_ptr())
            out[name] = tensor
    out.update({name: tensors[name] for name in info.unexpected_keys if name in tensors})
    return out


class _AdapterView:
    """What :meth:`WeightSync.attach` reads of a LoRA policy, for the megatron model's adapter: a ``peft_config`` (that
    it is one) and ``save_pretrained`` (the adapter as a peft directory, :func:`~swiftcore_train_megatron.lora.
    write_peft_adapter`: its rank, alpha and layers, which the engine loads once as the policy's adapter)."""

    def __init__(self, tensors: dict[str, Any], settings: Any, base_model: str) -> None:
        self.tensors = tensors
        self.settings = settings
        self.base_model = base_model
        self.peft_config = {"default": settings}

    def save_pretrained(self, directory: str) -> None:
        """Write the adapter to ``directory`` as peft's ``save_pretrained`` would."""
        from swiftcore_train_megatron.lora import write_peft_adapter

        tensors = {k: v.detach().cpu() for k, v in self.tensors.items()}
        s = self.settings
        write_peft_adapter(tensors, Path(directory), rank=s.rank, alpha=s.alpha, dropout=s.dropout,
                           base_model=self.base_model)  # fmt: skip


def adapter_tensors(model: Any, bridge: Any, settings: Any) -> dict[str, Any]:
    """The megatron model's LoRA (``settings``: its ``LoraSettings``) as the LoRA-only weight sync sends it: peft's
    state-dict names (``base_model.model.{HF layer}.lora_A.weight``, what ``get_peft_model_state_dict`` gives and the
    engine's ``update_adapter`` takes) -> each whole tensor, gathered over the tensor-parallel ranks (collective:
    every rank of the group calls it). No base weight is among them."""
    from swiftcore_train_megatron.lora import live_lora, peft_tensors

    return peft_tensors(live_lora(model, bridge), bridge, settings.rank)


class _HFView:
    """What :class:`WeightSync` reads of a policy: its state dict, here the Hugging Face names of the megatron
    weights (:func:`hf_tensors`)."""

    def __init__(self, tensors: dict[str, Any]) -> None:
        self._tensors = tensors

    def state_dict(self) -> dict[str, Any]:
        return self._tensors


# ---------------------------------------------------------------------------------------------- the loop


class GRPOLoop(TrainLoop):
    """:class:`~swiftcore_train_megatron.loop.TrainLoop` with GRPO's step: rollouts on rank 0, the loss everywhere.

    Args (besides the loop's):
        options: the ``grpo`` recipe's ``GRPOOptions``.
    """

    def __init__(self, *, options: Any, **loop: Any) -> None:
        super().__init__(**loop)
        self.options = options
        self.engine: Any = None
        self.weight_sync: Any = None
        self.rewards: list[Any] = []
        self.reward_weights: list[float] = []
        self.stop_ids: set[int] = set()
        self._prompt_ids: dict[str, list[int]] = {}
        self._spec: Any = None  # the model's spec, on rank 0 (attach_rollouts): the weight sync's names
        # The engine starts on the base checkpoint: step 0's full weights. A LoRA policy syncs at step 0 too: the
        # adapter is attached then (and --lora-init-adapter may start from a trained one).
        self._synced_step: int | None = 0 if self.lora is None else None
        self.aux = self._router_aux_loss()
        self.reference: Any = None

    def attach_reference(self, model: Any) -> None:
        """Every rank: the reference model of ``--grpo-beta`` (a sharded megatron model, frozen here), whose
        log-probs of each rollout batch TRL's KL term reads."""
        self.reference = model.eval().requires_grad_(False)

    def _router_aux_loss(self) -> Any:
        """TRL's GRPO term of a MoE model: ``router_aux_loss_coef * aux_loss`` of the policy's forward pass, when the
        (text) config has ``output_router_logits`` and a coefficient other than 0
        (:func:`~swiftcore_train_megatron.engine.router_aux_loss_coef`); the
        :class:`~swiftcore_train_megatron.engine.RouterAuxLoss` that computes it from megatron's routers, else None."""
        from swiftcore_train_megatron.engine import RouterAuxLoss, router_aux_loss_coef

        coef = router_aux_loss_coef(self.cfg.model, rule="grpo") if self.bridge.num_experts() > 0 else 0.0
        return RouterAuxLoss(self.model, coef) if coef else None

    def attach_rollouts(self, plan: Any, plugins: Any) -> None:
        """On rank 0: the rollout engine (the transformers backend on ``--model``, in this process), the weight
        sync, and the rewards, as the ``grpo`` recipe builds them."""
        import torch
        from swiftcore_recipe_rl import TRLReward, WeightSync, create_rollout_engine, stop_token_ids

        device = "cuda" if torch.cuda.is_available() else "cpu"
        self.engine = create_rollout_engine("transformers", plan.cfg, plugins, template=plan.template.name,
                                            device=device)  # fmt: skip
        self.weight_sync = WeightSync(self.engine, bucket_mb=self.options.sync_bucket_mb)
        codec = plan.local.codec
        self.rewards = [TRLReward(r, codec, plan.prompts.reward_records) for r in plan.rewards]
        weights = self.options.weights()
        self.reward_weights = [weights.get(r.name, 1.0) for r in plan.rewards]
        self.stop_ids = set(stop_token_ids(codec.template, codec.tokenizer))
        self._prompt_ids = plan.prompts.ids
        self._spec = plan.spec

    def close(self) -> None:
        """Close the rollout engine (rank 0)."""
        if self.engine is not None:
            self.engine.close()
            self.engine = None

    # ------------------------------------------------------------------ rollouts (rank 0)

    def _sync(self) -> dict[str, float]:
        """Push this step's weights to the engine (collective over the tensor-parallel ranks of data-parallel
        replica 0, rank 0's: they gather their shards; the other replicas hold the same weights and send nothing);
        rank 0's timing."""
        from megatron.core import parallel_state

        if self._synced_step == self.step:
            return {"sync_s": 0.0, "sync_bytes": 0.0}
        if parallel_state.get_data_parallel_rank() != 0:
            self._synced_step = self.step
            return {"sync_s": 0.0, "sync_bytes": 0.0}
        start = time.perf_counter()
        if self.lora is not None:
            return self._sync_adapter(start)
        tensors = hf_tensors(self.model, self.bridge)
        self._synced_step = self.step
        if self.weight_sync is None:
            return {"sync_s": 0.0, "sync_bytes": 0.0}
        tensors = model_named_tensors(tensors, self._spec, self.cfg.model)
        stats = self.weight_sync.push(_HFView(tensors))
        return {"sync_s": time.perf_counter() - start, "sync_bytes": float(stats.bytes)}

    def _sync_adapter(self, start: float) -> dict[str, float]:
        """LoRA-only sync (collective): the adapter's tensors, gathered over the tensor-parallel ranks, go to the
        engine's policy adapter (attached on the first sync by the recipe's :class:`WeightSync`) through the engine's
        ``update_adapter``; the base weights, which LoRA does not train, never move."""
        tensors = adapter_tensors(self.model, self.bridge, self.lora[0])
        self._synced_step = self.step
        if self.weight_sync is None:
            return {"sync_s": 0.0, "sync_bytes": 0.0}
        self.weight_sync.attach(_AdapterView(tensors, self.lora[0], self.cfg.model))
        self.weight_sync.engine.update_adapter(self.weight_sync.adapter, tensors)
        moved = sum(t.numel() * t.element_size() for t in tensors.values())
        return {"sync_s": time.perf_counter() - start, "sync_bytes": float(moved)}

    @property
    def rollout_adapter(self) -> str | None:
        """The engine's adapter the rollouts are sampled with: the policy's under ``--tuner lora``, else none."""
        return self.weight_sync.adapter if self.lora is not None and self.weight_sync is not None else None

    def _generate(self, rows: list[dict]) -> dict[str, Any]:
        """Rank 0: ``--num-generations`` completions of each row's prompt, their rewards and advantages."""
        import torch
        from swiftcore_infer import Request, SamplingParams

        opts = self.options
        sampling = SamplingParams(
            max_new_tokens=int(opts.max_completion_length), temperature=float(opts.rollout_temperature),
            top_p=float(opts.rollout_top_p), top_k=int(opts.rollout_top_k or 0),
        )  # fmt: skip
        size = opts.num_generations
        expanded = [row for row in rows for _ in range(size)]
        adapter = self.rollout_adapter
        requests = [Request(prompt=list(self._prompt_ids[r["prompt"]]), sampling=sampling, adapter=adapter)
                    for r in expanded]  # fmt: skip
        start = time.perf_counter()
        # Sampled under --seed and the step alone, whatever the layout drew from the RNG before (a run at --tp 2
        # samples step N's rollouts as one at --tp 1 does, from the same weights).
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.cfg.seed + self.step)
            out = self.engine.generate_rollouts(requests)
        rollout_s = time.perf_counter() - start
        completions = [list(map(int, ids)) for _, ids in out]
        prompts = [r["prompt"] for r in expanded]
        columns = {k: [r[k] for r in expanded] for k in expanded[0] if k != "prompt"}
        scores = []
        for reward in self.rewards:
            got = reward.score(prompts, [None] * len(prompts), completions, **columns)
            scores.append([float("nan") if s is None else float(s) for s in got])
        per_func = torch.tensor(scores, dtype=torch.float32).t().reshape(len(expanded), len(self.rewards))
        weights = torch.tensor(self.reward_weights, dtype=torch.float32)
        advantages = group_advantages(per_func, weights, size, opts.scale_rewards)
        truncated = [not ids or ids[-1] not in self.stop_ids for ids in completions]
        rewards = (per_func * weights).nansum(dim=1)
        rewards[torch.isnan(per_func).all(dim=1)] = torch.nan
        metrics = {f"rewards/{r.reward.name}/mean": float(torch.nanmean(per_func[:, k])) for k, r in
                   enumerate(self.rewards)}  # fmt: skip
        metrics.update(
            reward=float(torch.nanmean(rewards)),
            reward_std=float(_nanstd(rewards)),
            frac_reward_zero_std=float(
                (_nanstd(rewards.view(-1, size), dim=1) == 0).float().mean() if size > 1 else 1.0
            ),
            **{"completions/mean_length": sum(map(len, completions)) / len(completions)},
            rollout_s=rollout_s,
        )
        return {
            "prompt_ids": [list(self._prompt_ids[p]) for p in prompts],
            "completion_ids": completions,
            "truncated": truncated,
            "advantages": advantages.tolist(),
            "metrics": metrics,
        }

    # ------------------------------------------------------------------ the step (every rank)

    def rollout_batch(self, rollouts: dict[str, Any]) -> dict[str, Any]:
        """The rollouts as TRL's loss reads them: prompts left-padded, completions right-padded, masks, advantages
        (``--mask-truncated-completions``: a completion that did not end with a stop token counts no token)."""
        import torch

        pad = self.pad_token_id
        prompts, completions = rollouts["prompt_ids"], rollouts["completion_ids"]
        p_len, c_len = max(map(len, prompts)), max(1, max(map(len, completions)))
        prompt_ids = torch.tensor([[pad] * (p_len - len(p)) + p for p in prompts])
        prompt_mask = torch.tensor([[0] * (p_len - len(p)) + [1] * len(p) for p in prompts])
        completion_ids = torch.tensor([c + [pad] * (c_len - len(c)) for c in completions])
        completion_mask = torch.tensor([[1] * len(c) + [0] * (c_len - len(c)) for c in completions])
        if self.options.mask_truncated_completions:
            keep = torch.tensor([not t for t in rollouts["truncated"]], dtype=completion_mask.dtype)
            completion_mask = completion_mask * keep.unsqueeze(1)
        return {
            "prompt_ids": prompt_ids,
            "prompt_mask": prompt_mask,
            "completion_ids": completion_ids,
            "completion_mask": completion_mask,
            "advantages": torch.tensor(rollouts["advantages"], dtype=torch.float32),
            "num_items_in_batch": completion_mask.sum(),
        }

    def replica_batch(self, batch: dict[str, Any], per_rank: list[list[list[int]]]) -> dict[str, Any]:
        """This data-parallel replica's slice of the round's ``batch`` (:meth:`rollout_batch` of every replica's
        prompts, replica 0's first, as :meth:`_train_step` generates them): the rows of its own prompts' completions
        (``per_rank``: the step's micro-batches of each replica, the schedule's split of the data, as SFT and DPO
        train on it), as TRL hands each process its slice after the round's advantages. ``num_items_in_batch``
        stays the round's (TRL's global token count). One replica: ``batch`` itself."""
        from megatron.core import parallel_state

        if len(per_rank) == 1:
            return batch
        prompts = [len(batches[0]) for batches in per_rank]
        per_prompt = batch["completion_ids"].shape[0] // sum(prompts)  # completions of each prompt
        rank = parallel_state.get_data_parallel_rank()
        start = sum(prompts[:rank]) * per_prompt
        rows = slice(start, start + prompts[rank] * per_prompt)
        return {k: v if k == "num_items_in_batch" else v[rows] for k, v in batch.items()}

    def step_on(self, share: Any) -> tuple[float, float]:
        """The end of a step on this replica's ``share`` of the step's loss (the shares summed over the
        data-parallel replicas are the step's loss, so the gradients summed over them, as
        :func:`~swiftcore_train_megatron.engine.reduce_gradients` sums them, are the step loss's): backward, the
        gradients reduced, clipped and applied; ``(the step's loss, grad norm)``."""
        from megatron.core import parallel_state

        from swiftcore_train_megatron.cp import reduce_loss_sum

        share.backward()
        loss = reduce_loss_sum(share.detach().clone(), parallel_state.get_data_parallel_group())
        return float(loss), self._apply_gradients()

    def learn(self, batch: dict[str, Any]) -> tuple[float, float, dict[str, float]]:
        """One optimiser step on this data-parallel replica's slice of the round (:meth:`replica_batch`; with one
        replica, the round): ``(loss, grad norm, TRL's metrics)``, the loss and metrics the whole round's.

        Each replica is one of TRL's processes: its loss is TRL's of its slice (normalised as TRL normalises a
        process's share: ``dapo`` by the round's completion tokens over the process count, ``grpo`` per sequence
        then over the slice's sequences) and TRL's DDP averages the processes' gradients, so each replica's share is
        that loss over the replica count."""
        from megatron.core import parallel_state

        dp_group = parallel_state.get_data_parallel_group()
        replicas = parallel_state.get_data_parallel_world_size()
        if self.reference is not None:  # TRL's reference log-probs, of the same rows at the same temperature
            import torch

            with torch.no_grad():
                batch = {**batch, "ref_per_token_logps": completion_logps(
                    self.reference, batch, self.options.rollout_temperature
                )}  # fmt: skip
        logps, aux_loss = completion_logps_and_aux(self.model, batch, self.options.rollout_temperature, self.aux)
        loss, metrics = grpo_loss(logps, batch, self.options, max_completion_length=self.options.max_completion_length,
                                  data_parallel=dp_group)  # fmt: skip
        if aux_loss is not None:  # TRL adds it after the policy loss, unscaled (one rollout batch is one step here)
            loss = loss + self.aux.coef * aux_loss
            # TRL logs the processes' mean (gather_for_metrics)
            metrics = {**metrics, "aux_loss": float(_Gather(dp_group).gather(aux_loss.detach()).mean())}
        loss, norm = self.step_on(loss / replicas)
        return loss, norm, metrics

    def _train_step(self) -> tuple[float, float, int]:
        """Sync the engine to the current weights, generate and score the step's round on rank 0 (the prompts of
        every data-parallel replica, ``--batch-size`` each, replica 0's first: the advantages and reward metrics are
        the round's), hand it to every rank, and take the optimiser step, each replica on its prompts' completions;
        ``(loss, grad norm, tokens)``."""
        import torch.distributed as dist

        per_rank = self.schedule.micro_batches(self.step)
        rows = [self.train_samples[i] for batches in per_rank for i in batches[0]]
        sync = self._sync()
        payload = [self._generate(rows) if dist.get_rank() == 0 else None]
        dist.broadcast_object_list(payload, src=0)
        rollouts = payload[0]
        batch = self.rollout_batch(rollouts)
        loss, norm, metrics = self.learn(self.replica_batch(batch, per_rank))
        self._step_metrics = {**rollouts["metrics"], **metrics, **sync}
        tokens = int(batch["prompt_mask"].sum() + batch["completion_mask"].sum())
        return loss, norm, tokens


def _nanstd(x: Any, dim: int | None = None) -> Any:
    from trl.trainer.utils import nanstd

    return nanstd(x) if dim is None else nanstd(x, dim=dim)
