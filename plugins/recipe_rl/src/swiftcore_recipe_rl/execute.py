"""Execute a :class:`~swiftcore_recipe_rl.plan.RunPlan` in this process: load the policy (and the ``gkd`` / ``opd``
teacher),
build the recipe's TRL trainer on the plan's encoded prompts, attach the rollout engine, write the manifest, train
and report (:func:`execute`).

It checks nothing the plan step checked and encodes no prompt: the plan carries them. The Ray executor runs it in
its trainer actor, with the rewards and the rollout engine it placed in actors of their own
(:mod:`swiftcore_recipe_rl.ray_actors`).

Importing this module imports neither torch nor TRL.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from swiftcore_recipe_rl.options import (
    GKDOptions,
    GRPOOptions,
    OPDOptions,
    OPSDOptions,
    ReinforcePPOptions,
    RolloutOptions,
    SamplingOptions,
)
from swiftcore_recipe_rl.plan import RunPlan, connect_server, media_preparer

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = ["execute", "load_codec"]

log = logging.getLogger("swiftcore.rl")


def load_codec(plan: RunPlan, plugins: PluginSet) -> Any:
    """The run's :class:`~swiftcore_recipe_rl.rollout.PromptCodec`: the one the plan step built when this is its
    process, else the plan's template and the model's tokenizer loaded again (the plan step checked that they fit)."""
    if plan.local.codec is not None:
        return plan.local.codec
    from swiftcore.api.models import load_tokenizer
    from swiftcore.api.template import get_template
    from swiftcore_recipe_rl.rollout import PromptCodec

    name = plan.cfg.template or plan.spec.default_template
    tokenizer = load_tokenizer(plan.cfg.model)
    media = media_preparer(plan.spec, plan.cfg.model, tokenizer) if plan.prompts.media else None
    return PromptCodec(get_template(name, plugins), tokenizer, media=media)


def _generation_defaults(cfg: Any, template: Any) -> dict[str, Any]:
    """What inference on the run's checkpoints defaults to (``swiftcore_args.json``, as SFT records it): the thinking
    mode ``--enable-thinking`` / ``--disable-thinking`` gave the rollouts, for a template with a thinking switch;
    nothing otherwise (the rollouts were prompted in the template's own default, which inference keeps)."""
    if cfg.enable_thinking is None or not template.thinking_switch:
        return {}
    return {"chat_template_kwargs": {"enable_thinking": bool(cfg.enable_thinking)}}


def execute(
    plan: RunPlan,
    plugins: PluginSet,
    *,
    rewards: Sequence[Any] | None = None,
    rollout_engine: Any = None,
    record: Mapping[str, Any] | None = None,
) -> Any:
    """Train ``plan``; the run's :class:`~swiftcore_train.TrainResult`.

    Args:
        plan: the run, planned by :func:`~swiftcore_recipe_rl.plan.plan_run`.
        plugins: the plugin set the run was planned with (or the same set loaded in this process).
        rewards: the rewards as this process calls them (the Ray executor's reward workers); default: the plan's.
        rollout_engine: a rollout engine to generate with (the Ray executor's rollout worker); default: the
            plan's ``--rollout-server``, else ``--rollout-engine``'s colocated engine, else TRL's generation.
        record: more fields for ``args.json`` (the Ray executor's ``ray``: where each part ran).
    """
    from swiftcore_train import start_run, train_and_report

    cfg, options, recipe = plan.cfg, plan.options, plan.recipe
    rewards = list(plan.rewards if rewards is None else rewards)
    codec = load_codec(plan, plugins)
    engine = rollout_engine if rollout_engine is not None else _rollout_server(plan)
    log.info(
        "%s: model %s (%s), template %s, %s, %d prompts x %d generations",
        recipe,
        plan.spec.name,
        plan.spec.provider,
        plan.template.name,
        f"teacher {_teacher_name(options)}"
        if isinstance(options, GKDOptions | OPDOptions)
        else "rewards " + ", ".join(f"{r.name} ({r.spec.provider})" for r in rewards),
        len(plan.prompts.dataset),
        getattr(options, "num_generations", 1),
    )
    trainer = _build_trainer(plan, plugins, codec, rewards)
    if engine is not None or options.rollout_engine != "trainer":
        _attach_rollout_engine(trainer, plan, plugins, engine)
    args_record = start_run(
        cfg,
        plan.output_dir,
        plan.spec,
        plugins,
        fresh=plan.resume is None,
        resumed_step=plan.resumed_step,
        template=plan.template,
        rewards=[{"name": r.name, "provider": str(r.spec.provider), "options": r.options} for r in rewards],
        generation_defaults=_generation_defaults(cfg, codec.template),
        **dict(record or {}),
        **{recipe: asdict(options)},
    )
    trainer.checkpoint_extras = {"swiftcore_args.json": json.dumps(args_record, indent=2)}
    if plan.prompts.media:  # as SFT's: a checkpoint trained on images needs its processor files to be served with them
        from swiftcore_media import processor_files

        trainer.checkpoint_extras.update(processor_files(cfg.model))
    return train_and_report(
        trainer, cfg, plan.output_dir, train_samples=len(plan.prompts.dataset), evaluate=False, resume=plan.resume
    )


def _rollout_server(plan: RunPlan) -> Any:
    """The plan's ``--rollout-server`` client: the plan step's when this is its process, else connected again."""
    if plan.local.rollout_server is not None:
        return plan.local.rollout_server
    return connect_server(plan.options, plan.cfg, plan.template.name)


def _build_trainer(plan: RunPlan, plugins: PluginSet, codec: Any, rewards: list[Any]) -> Any:
    """The recipe's TRL trainer: the policy loaded with the run's tuner, the rewards (or the teacher), the TRL
    config, the plan's encoded prompts as its dataset, and the episode loop for ``--environment``."""
    import torch
    from datasets import Dataset
    from swiftcore_train import JsonlLogCallback, apply_tuner, trainable_summary

    from swiftcore.api.models import load_model
    from swiftcore_recipe_rl.recipe import CONFIGS
    from swiftcore_recipe_rl.rewards import TRLReward
    from swiftcore_recipe_rl.rollout import stop_token_ids
    from swiftcore_recipe_rl.shaping import extra_rewards
    from swiftcore_recipe_rl.trainer import chunk_lm_heads, configure_loss_variants, trainer_class

    cfg, options, spec, tokenizer = plan.cfg, plan.options, plan.spec, codec.tokenizer
    torch.manual_seed(cfg.seed)
    dtype = "float32" if cfg.dtype == "float32" else cfg.dtype
    model = load_model(spec, cfg.model, plugins, torch_dtype=dtype)
    # Rollouts end at the template's end-of-turn, as served replies do (TRL stops at the model's eos ids).
    model.generation_config.eos_token_id = stop_token_ids(codec.template, tokenizer)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"  # TRL pads prompts on the left for generation
    model = apply_tuner(model, spec, cfg)  # LoRA with the family's targets and exclusions, as SFT trains it
    log.info(trainable_summary(model))
    if cfg.gradient_checkpointing and cfg.tuner == "lora":
        model.enable_input_require_grads()

    if isinstance(options, GKDOptions):
        method: dict[str, Any] = {
            "teacher_model": load_model(plan.teacher, options.teacher_model, plugins, torch_dtype=dtype)
        }
    else:
        reward_funcs = [TRLReward(r, codec, plan.prompts.reward_records) for r in rewards]
        if not reward_funcs and isinstance(options, OPDOptions):  # pure distillation: TRL needs a reward function
            reward_funcs = [no_reward]
        method = {"reward_funcs": reward_funcs + extra_rewards(options)}  # shaping (--overlong-buffer) last
    trainer = trainer_class(plan.recipe)(
        model=model,
        **method,
        args=CONFIGS[plan.recipe](cfg, options, plan.output_dir, reward_names=[r.name for r in rewards]),
        train_dataset=Dataset.from_list(plan.prompts.dataset),
        processing_class=tokenizer,
        callbacks=[JsonlLogCallback(plan.output_dir / "logs.jsonl")],
    )
    trainer.prompt_ids = plan.prompts.ids
    if plan.prompts.media:  # image prompts: their ids, pixels and reward records by row (trainer.py's ImagePrompts)
        trainer.attach_media(plan.prompts.media, codec.media)
    if plan.environment is not None:  # TRL's hook for custom rollouts: one episode per prompt
        trainer.rollout_func = plan.environment.episodes(codec, plan.prompts.environment_rows)
    if isinstance(options, ReinforcePPOptions):
        trainer.baseline = options.reinforce_pp_baseline
    if isinstance(options, RolloutOptions):  # TRL's GRPO and RLOO trainers: their log-probs from the chunked head
        chunk_lm_heads(trainer, getattr(options, "loss_chunk_size", None))
    if isinstance(options, GRPOOptions):
        configure_loss_variants(trainer, options, chord_samples=plan.chord_samples, seed=cfg.seed)
    if isinstance(options, OPSDOptions):  # the policy is the teacher, shown each row's privileged context
        from swiftcore_recipe_rl.opsd import teacher_prompt_ids

        trainer.teacher_prompt_ids = teacher_prompt_ids(plan.prompts, codec, options)
        trainer.context_column, trainer.teacher_mode = options.opsd_context, options.opsd_teacher
        if options.opsd_teacher == "initial" and cfg.tuner != "lora":  # LoRA: the adapter is switched off instead
            teacher = load_model(spec, cfg.model, plugins, torch_dtype=dtype)
            trainer.teacher = teacher.to(trainer.accelerator.device).eval().requires_grad_(False)
        trainer.reward_weight = options.opd_reward_weight
    elif isinstance(options, OPDOptions) and options.teacher_server:  # the teacher's log-probs over HTTP
        from swiftcore_recipe_rl.teacher_server import attach_teacher_server

        attach_teacher_server(trainer, options.teacher_server, records=plan.prompts.records, media=plan.prompts.media)
        trainer.reward_weight = options.opd_reward_weight
    elif isinstance(options, OPDOptions):  # the teacher scores the student's tokens; frozen, on the trainer's device
        teacher = load_model(plan.teacher, options.teacher_model, plugins, torch_dtype=dtype)
        trainer.teacher = teacher.to(trainer.accelerator.device).eval().requires_grad_(False)
        trainer.reward_weight = options.opd_reward_weight
    return trainer


def _teacher_name(options: Any) -> str:
    """The teacher, as the run's first log line names it."""
    if isinstance(options, OPSDOptions):
        return f"the policy itself with the {options.opsd_context!r} context"
    return getattr(options, "teacher_server", "") or options.teacher_model


def no_reward(completions: list[Any], **kwargs: Any) -> list[float]:
    """``opd`` without ``--reward``: every completion scores 0 (TRL's GRPOTrainer needs a reward function; the
    advantages are the teacher's)."""
    return [0.0] * len(completions)


def _attach_rollout_engine(trainer: Any, plan: RunPlan, plugins: PluginSet, engine: Any = None) -> None:
    """The rollout engine: ``engine`` when given (a :class:`~swiftcore_recipe_rl.remote.RemoteRolloutEngine`:
    ``--rollout-server`` or Ray's rollout worker), else for ``--rollout-engine NAME`` a colocated engine of that
    backend on the policy's base checkpoint; given the policy's adapter, synced before each generation round
    (:mod:`swiftcore_recipe_rl.sync`)."""
    from swiftcore_recipe_rl.sync import WeightSync, create_rollout_engine
    from swiftcore_recipe_rl.trainer import configure_async_rollouts

    options: SamplingOptions = plan.options
    where = f"at {engine.url}" if engine is not None else "colocated"
    if engine is None:
        engine = create_rollout_engine(options.rollout_engine, plan.cfg, plugins, template=plan.template.name,
                                       device=str(trainer.accelerator.device),
                                       draft=options.rollout_draft or None)  # fmt: skip
    trainer.rollout_engine = engine
    trainer.weight_sync = WeightSync(engine, bucket_mb=options.sync_bucket_mb)
    trainer.weight_sync.attach(trainer.model)
    prompt_ids = plan.prompts.ids
    trainer.prompt_records = {tuple(prompt_ids[text]): record for text, record in plan.prompts.records.items()}
    configure_async_rollouts(trainer, options)
    rollout = options if isinstance(options, RolloutOptions) else None  # the reward-driven recipes' (not gkd's)
    mode = rollout.importance_sampling_mode() if rollout is not None else None
    trainer.importance_sampling = mode is not None
    log.info(
        "rollouts: %s engine %s%s, %s weight sync before each generation round%s%s",
        options.rollout_engine if where == "colocated" else "swiftcore rollout",
        where,
        f" decoding speculatively with the draft {options.rollout_draft} (kept as trained while the policy is synced)"
        if getattr(options, "rollout_draft", "") and where == "colocated"
        else "",
        "LoRA-only" if hasattr(trainer.model, "peft_config") else f"bucketed ({options.sync_bucket_mb:g} MiB)",
        f"; up to {trainer.max_staleness} round(s) generated and scored ahead while earlier steps train (at most "
        f"{trainer.max_staleness} step(s) stale)"
        if trainer.async_rollouts
        else "",
        f"; importance sampling {mode} at {rollout.rollout_is_clip_max:g}" if rollout is not None and mode else "",
    )
