"""The RL recipes ``grpo``, ``rloo``, ``reinforce_pp`` and ``gkd``: one path (:func:`run_recipe`), read top to bottom
like the core's SFT recipe; the recipes differ only in their TRL config (:data:`CONFIGS`) and trainer class
(:func:`~swiftcore_recipe_rl.trainer.trainer_class`).

Everything that can be checked before training is checked first (model, template, rewards and their options,
every prompt row, the columns the rewards read, prompt lengths), so a bad input fails in seconds. The loss,
advantages and rollouts are TRL 1.16's ``GRPOTrainer`` / ``RLOOTrainer`` (see :mod:`swiftcore_recipe_rl.trainer`);
swiftcore supplies the model loading and LoRA (the family's targets and exclusions), the template-encoded prompts, the
rewards, the output directory, the ``args.json`` manifest and atomic checkpoints.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any

from swiftcore_recipe_rl.options import (
    GKDOptions,
    GRPOOptions,
    ReinforcePPOptions,
    RLOOOptions,
    RolloutOptions,
    SamplingOptions,
)

__all__ = [
    "CONFIGS",
    "gkd_config",
    "grpo_config",
    "reinforce_pp_config",
    "rloo_config",
    "run",
    "run_gkd",
    "run_recipe",
    "run_reinforce_pp",
    "run_rloo",
]

log = logging.getLogger("swiftcore.rl")


def _rl_config(
    cfg: Any, options: SamplingOptions, output_dir: Path, *, reward_names: list[str], args_class: type, **method: Any
) -> Any:
    """A TRL ``GRPOConfig``/``RLOOConfig``/``DistillationConfig`` from the common options, the shared sampling (and,
    for the reward-driven recipes, rollout) options and ``method``'s.

    ``--batch-size`` counts prompts per device and step: each brings ``--num-generations`` completions (one for
    ``gkd``), so TRL's per-device batch (which counts completions) is their product and always holds whole groups.
    """
    from swiftcore_train import training_arguments

    rollout: dict[str, Any] = {}
    if isinstance(options, RolloutOptions):
        weights = options.weights()
        rollout = dict(
            num_generations=options.num_generations,
            num_iterations=options.num_iterations,
            mask_truncated_completions=options.mask_truncated_completions,
            reward_weights=[weights.get(name, 1.0) for name in reward_names],
        )
        mode = options.importance_sampling_mode()
        if mode is not None:  # TRL's correction of vLLM rollouts, fed the engine's sampling log-probs (trainer.py)
            rollout.update(
                vllm_importance_sampling_correction=True,
                vllm_importance_sampling_mode=mode,
                vllm_importance_sampling_clip_max=options.rollout_is_clip_max,
            )
    return training_arguments(
        cfg,
        output_dir,
        evaluate=False,
        args_class=args_class,
        per_device_train_batch_size=cfg.batch_size * rollout.get("num_generations", 1),
        fp16=cfg.dtype == "float16",
        include_num_input_tokens_seen="no",  # an RL batch carries prompts and completions, not input_ids
        max_completion_length=options.max_completion_length,
        temperature=options.rollout_temperature,
        top_p=options.rollout_top_p,
        top_k=options.rollout_top_k,
        log_completions=False,
        **rollout,
        **method,
    )


def grpo_config(cfg: Any, options: GRPOOptions, output_dir: Path, *, reward_names: list[str]) -> Any:
    """TRL's ``GRPOConfig`` for ``--recipe grpo``."""
    from trl import GRPOConfig

    return _rl_config(
        cfg, options, output_dir, reward_names=reward_names, args_class=GRPOConfig,
        loss_type=options.grpo_loss_type, beta=options.grpo_beta, epsilon=options.grpo_epsilon,
        epsilon_high=options.grpo_epsilon_high, scale_rewards=options.scale_rewards,
    )  # fmt: skip


def rloo_config(cfg: Any, options: RLOOOptions, output_dir: Path, *, reward_names: list[str]) -> Any:
    """TRL's ``RLOOConfig`` for ``--recipe rloo``."""
    from trl import RLOOConfig

    return _rl_config(
        cfg, options, output_dir, reward_names=reward_names, args_class=RLOOConfig,
        beta=options.rloo_beta, epsilon=options.rloo_epsilon, epsilon_high=options.rloo_epsilon_high,
        normalize_advantages=options.rloo_normalize_advantages,
    )  # fmt: skip


def reinforce_pp_config(cfg: Any, options: ReinforcePPOptions, output_dir: Path, *, reward_names: list[str]) -> Any:
    """TRL's ``GRPOConfig`` for ``--recipe reinforce_pp``: ``beta`` is the KL weight of the returns (the trainer
    keeps it out of the loss), ``loss_type="dapo"`` the token-level mean over the generation batch that
    REINFORCE++ uses (OpenRLHF's token-level policy loss), ``scale_rewards="none"`` (the advantages are the
    trainer's own)."""
    from trl import GRPOConfig

    return _rl_config(
        cfg, options, output_dir, reward_names=reward_names, args_class=GRPOConfig,
        loss_type="dapo", beta=options.reinforce_pp_beta, epsilon=options.reinforce_pp_epsilon,
        epsilon_high=options.reinforce_pp_epsilon_high, scale_rewards="none",
    )  # fmt: skip


def gkd_config(cfg: Any, options: GKDOptions, output_dir: Path, *, reward_names: list[str] = ()) -> Any:
    """TRL's ``DistillationConfig`` for ``--recipe gkd`` (``beta`` selects the divergence; the rollout temperature
    is also the temperature of both distributions in the loss, as TRL has it)."""
    from trl import DistillationConfig

    return _rl_config(
        cfg, options, output_dir, reward_names=list(reward_names), args_class=DistillationConfig, beta=options.gkd_beta,
    )  # fmt: skip


#: Each recipe's TRL config builder.
CONFIGS = {"grpo": grpo_config, "rloo": rloo_config, "reinforce_pp": reinforce_pp_config, "gkd": gkd_config}


def _refuse_unsupported(cfg: Any) -> None:
    from swiftcore.api import SwiftcoreError

    unsupported = {
        "--val-dataset / --split-ratio": bool(cfg.val_dataset) or cfg.split_ratio > 0,
        "--packing": cfg.packing,
        "--padding-free": cfg.padding_free,
    }
    given = [flag for flag, on in unsupported.items() if on]
    if given:
        raise SwiftcoreError(f"{', '.join(given)}: not supported by the {cfg.recipe} recipe yet; drop them")


def _reward_record(record: dict, own: Any, cfg: Any) -> dict:
    """``record`` (a prompt record as the policy is prompted with it) as the rewards get it: without the run's
    ``--enable-thinking/--disable-thinking`` default, which :func:`_encode_prompts` added under the row's own
    ``chat_template_kwargs`` (``own``: the row's, kept; what an environment's ``reset`` set itself is kept too).

    That default is how the policy is prompted; a reward that renders the conversation for a model of its own (the
    ``reward_model``) applies that model's defaults, and the row's own kwargs on top of them."""
    if cfg.enable_thinking is None or (isinstance(own, dict) and "enable_thinking" in own):
        return record
    kwargs = dict(record.get("chat_template_kwargs") or {})
    if kwargs.get("enable_thinking", None) is not cfg.enable_thinking:  # the environment's own choice: kept
        return record
    del kwargs["enable_thinking"]
    out = {k: v for k, v in record.items() if k != "chat_template_kwargs"}
    return {**out, "chat_template_kwargs": kwargs} if kwargs else out


def _encode_prompts(
    rows: list,
    codec: Any,
    cfg: Any,
    options: SamplingOptions,
    records: dict[str, dict] | None = None,
    episodes: Any = None,
    reward_records: dict[str, dict] | None = None,
) -> tuple[list[dict], dict[str, list[int]]]:
    """The TRL dataset rows (``prompt`` text + reward columns) and the text -> template ids map; ``records``, when
    given, is filled with the text -> prompt record map (what a rollout engine encodes). With ``episodes`` (an
    :class:`~swiftcore_recipe_rl.environments.EpisodeRollout`) each prompt is what its environment's ``reset``
    returns for the row, and ``episodes.rows`` is filled with the text -> row record map. ``reward_records``, when
    given, is filled with the text -> record map the rewards get (:func:`_reward_record`: the prompt record without
    the run's thinking default)."""
    from swiftcore.api import SwiftcoreError

    room = cfg.max_length - options.max_completion_length
    dataset, ids_of = [], {}
    records = {} if records is None else records
    dropped = 0
    for row in rows:
        record = source = row.record
        if cfg.enable_thinking is not None:  # --enable-thinking/--disable-thinking: the default, a row's own wins
            kwargs = dict(record.get("chat_template_kwargs") or {})
            kwargs.setdefault("enable_thinking", cfg.enable_thinking)
            record = source = {**record, "chat_template_kwargs": kwargs}
        if episodes is not None:  # the prompt is the environment's (its tools shown), checked here like any other
            _, record = episodes.reset({**source, **row.columns})
        text, ids = codec.encode(record)
        if len(ids) > room:
            if cfg.truncation == "drop":
                dropped += 1
                continue
            raise SwiftcoreError(
                f"{row.where}: the prompt has {len(ids)} tokens; with --max-completion-length "
                f"{options.max_completion_length} that exceeds --max-length {cfg.max_length}: raise --max-length, "
                "shorten the prompt, or pass --truncation drop"
            )
        ids_of[text] = ids
        records[text] = record
        if reward_records is not None:
            reward_records[text] = _reward_record(record, row.record.get("chat_template_kwargs"), cfg)
        if episodes is not None:
            episodes.rows[text] = source
        dataset.append({"prompt": text, **row.columns})
    if dropped:
        log.warning("dropped %d prompt(s) longer than --max-length minus --max-completion-length", dropped)
    if not dataset:
        raise SwiftcoreError("no prompt left to train on (see the warning above)")
    return dataset, ids_of


def _connect_rollout_server(options: SamplingOptions, cfg: Any, template: str) -> Any:
    """``--rollout-server URL``: the server, checked (answers, serves this base checkpoint and template) before
    the model loads, so a wrong server fails in a second; None without the option."""
    url = getattr(options, "rollout_server", "")
    if not url:
        return None
    from swiftcore_recipe_rl.remote import connect_rollout_server

    engine = connect_rollout_server(
        url, cfg.model, template=template, lora=cfg.tuner != "full", timeout=options.rollout_server_timeout
    )
    log.info("rollouts: swiftcore rollout server %s (%s, weight version %d)", url, engine.info["backend"],
             engine.weight_version)  # fmt: skip
    return engine


def _attach_rollout_engine(
    trainer: Any,
    options: SamplingOptions,
    cfg: Any,
    plugins: Any,
    template: str,
    prompt_ids: dict[str, list[int]],
    prompt_records: dict[str, dict],
    engine: Any = None,
) -> None:
    """The rollout engine: ``engine`` when given (a :class:`~swiftcore_recipe_rl.remote.RemoteRolloutEngine`,
    ``--rollout-server``), else for ``--rollout-engine NAME`` a colocated engine of that backend on the policy's
    base checkpoint; given the policy's adapter, synced before each generation round
    (:mod:`swiftcore_recipe_rl.sync`)."""
    from swiftcore_recipe_rl.sync import WeightSync, create_rollout_engine

    where = f"at {engine.url}" if engine is not None else "colocated"
    if engine is None:
        engine = create_rollout_engine(
            options.rollout_engine, cfg, plugins, template=template, device=str(trainer.accelerator.device)
        )
    trainer.rollout_engine = engine
    trainer.weight_sync = WeightSync(engine, bucket_mb=options.sync_bucket_mb)
    trainer.weight_sync.attach(trainer.model)
    trainer.prompt_records = {tuple(prompt_ids[text]): record for text, record in prompt_records.items()}
    trainer.async_rollouts = getattr(options, "async_rollouts", False)
    mode = options.importance_sampling_mode() if isinstance(options, RolloutOptions) else None
    trainer.importance_sampling = mode is not None
    log.info(
        "rollouts: %s engine %s, %s weight sync before each generation round%s%s",
        options.rollout_engine if where == "colocated" else "swiftcore rollout",
        where,
        "LoRA-only" if hasattr(trainer.model, "peft_config") else f"bucketed ({options.sync_bucket_mb:g} MiB)",
        "; each round generated and scored while the step before trains (at most one round stale)"
        if trainer.async_rollouts
        else "",
        f"; importance sampling {mode} at {options.rollout_is_clip_max:g}" if mode else "",
    )


def _episodes(options: SamplingOptions, plugins: Any, codec: Any) -> Any:
    """``--environment NAME``: the episode loop over that environment's factory, its ``--environment-option``
    values bound to it and checked (None: single-turn rollouts)."""
    name = getattr(options, "environment", "")
    if not name:
        return None
    from swiftcore.api import resolve
    from swiftcore_recipe_rl.environments import EpisodeRollout, environment_factory

    spec = plugins.registry.get("environment", name)
    factory = resolve(spec.factory, what=f"environment {spec.name!r} of {spec.provider}")
    env_options = options.environment_options()
    factory = environment_factory(factory, env_options, name=spec.name, provider=spec.provider)
    log.info("multi-turn episodes: environment %s (%s)%s, at most %d replies each", spec.name, spec.provider,
             "".join(f" {k}={v}" for k, v in env_options.items()), options.max_turns)  # fmt: skip
    return EpisodeRollout(factory, codec, {}, max_turns=options.max_turns, name=spec.name)


def _resume(cfg: Any, output_dir: Path) -> Path | None:
    """The checkpoint ``--resume-from-checkpoint`` names (``latest``: the newest in ``--output-dir``)."""
    from swiftcore.api import SwiftcoreError

    value = cfg.resume_from_checkpoint
    if not value:
        return None
    if value in ("latest", "true", "True"):
        from transformers.trainer_utils import get_last_checkpoint

        last = get_last_checkpoint(str(output_dir)) if output_dir.is_dir() else None
        if last is None:
            raise SwiftcoreError(f"--resume-from-checkpoint latest: no checkpoint-N directory in {str(output_dir)!r}")
        return Path(last)
    return Path(value)


def run(cfg: Any, plugins: Any, options: GRPOOptions) -> Any:
    """The ``grpo`` recipe: sample ``--num-generations`` completions per prompt, score them with the
    ``--reward`` functions, and optimise the policy with TRL's GRPO loss of ``--grpo-loss-type``."""
    return run_recipe("grpo", cfg, plugins, options)


def run_rloo(cfg: Any, plugins: Any, options: RLOOOptions) -> Any:
    """The ``rloo`` recipe: TRL's RLOO, each completion's advantage its reward minus the mean reward of the other
    completions of its prompt (leave-one-out), a clipped sequence-level ratio, the KL penalty in the reward."""
    return run_recipe("rloo", cfg, plugins, options)


def run_reinforce_pp(cfg: Any, plugins: Any, options: ReinforcePPOptions) -> Any:
    """The ``reinforce_pp`` recipe: REINFORCE++(-baseline), token-level KL-penalised returns normalised over the
    batch, PPO's clipped per-token loss (see :mod:`swiftcore_recipe_rl.trainer`)."""
    return run_recipe("reinforce_pp", cfg, plugins, options)


def run_gkd(cfg: Any, plugins: Any, options: GKDOptions) -> Any:
    """The ``gkd`` recipe: on-policy distillation; the student samples a completion per prompt and learns to match
    the ``--teacher-model``'s next-token distributions on it (generalised JSD of ``--gkd-beta``, TRL's
    DistillationTrainer)."""
    return run_recipe("gkd", cfg, plugins, options)


def run_recipe(recipe: str, cfg: Any, plugins: Any, options: SamplingOptions) -> Any:
    """Run the RL recipe ``recipe`` (a key of :data:`CONFIGS`): check everything, load, train, report."""
    from swiftcore_train import load_rewards, parse_reward_options, start_run, train_and_report

    from swiftcore.api.models import check_requirements, load_model, resolve_model_spec
    from swiftcore_recipe_rl.data import load_prompt_rows
    from swiftcore_recipe_rl.rewards import TRLReward
    from swiftcore_recipe_rl.rollout import PromptCodec, stop_token_ids

    if cfg.recipe == "sft":  # called from Python with the default: the manifest must still name the recipe
        from dataclasses import replace

        cfg = replace(cfg, recipe=recipe)
    cfg.validate()
    _refuse_unsupported(cfg)
    output_dir = Path(cfg.output_dir)
    spec = resolve_model_spec(cfg.model, plugins, model_type=cfg.model_type)
    check_requirements(spec)
    rewards = []
    if isinstance(options, RolloutOptions):
        rewards = load_rewards(
            plugins,
            options.reward,
            options=parse_reward_options(options.reward_option),
            fallback=options.reward_fallback,
            timeout=options.reward_timeout,
        )
    teacher_spec = None
    if isinstance(options, GKDOptions):  # the teacher's spec now, so a bad directory fails before any loading
        teacher_spec = resolve_model_spec(options.teacher_model, plugins)
        check_requirements(teacher_spec)
    rows = load_prompt_rows(cfg.dataset, skip_bad_rows=cfg.skip_bad_rows)
    for reward in rewards:
        reward.check_columns(rows[0].columns, where=f"--dataset {', '.join(cfg.dataset)}")
    from swiftcore_train import check_recipe_fits_model, load_template

    check_recipe_fits_model(cfg, spec, plugins)
    template_spec, template, tokenizer = load_template(cfg, spec, plugins)
    codec = PromptCodec(template, tokenizer)
    remote = _connect_rollout_server(options, cfg, template_spec.name)
    episodes = _episodes(options, plugins, codec)
    prompt_records: dict[str, dict] = {}
    reward_records: dict[str, dict] = {}
    dataset_rows, prompt_ids = _encode_prompts(rows, codec, cfg, options, prompt_records, episodes, reward_records)
    resume = _resume(cfg, output_dir)
    on_ray = getattr(options, "ray", False)
    if on_ray:
        from swiftcore_recipe_rl.ray_actors import inside_ray_trainer, run_on_ray, start_reward_workers

        if not inside_ray_trainer():  # everything is checked: the trainer actor runs the rest
            return run_on_ray(recipe, cfg, plugins, options)
        rewards = start_reward_workers(plugins, options.reward, rewards)
    log.info(
        "%s: model %s (%s), template %s, %s, %d prompts x %d generations",
        recipe,
        spec.name,
        spec.provider,
        template_spec.name,
        f"teacher {options.teacher_model}"
        if isinstance(options, GKDOptions)
        else "rewards " + ", ".join(f"{r.name} ({r.spec.provider})" for r in rewards),
        len(dataset_rows),
        getattr(options, "num_generations", 1),
    )

    import torch
    from datasets import Dataset
    from swiftcore_train import JsonlLogCallback, apply_tuner, trainable_summary

    from swiftcore_recipe_rl.trainer import trainer_class

    torch.manual_seed(cfg.seed)
    model = load_model(spec, cfg.model, plugins, torch_dtype="float32" if cfg.dtype == "float32" else cfg.dtype)
    # Rollouts end at the template's end-of-turn, as served replies do (TRL stops at the model's eos ids).
    model.generation_config.eos_token_id = stop_token_ids(template, tokenizer)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"  # TRL pads prompts on the left for generation
    model = apply_tuner(model, spec, cfg)  # LoRA with the family's targets and exclusions, as SFT trains it
    log.info(trainable_summary(model))
    if cfg.gradient_checkpointing and cfg.tuner == "lora":
        model.enable_input_require_grads()

    reward_names = [r.name for r in rewards]
    if isinstance(options, GKDOptions):
        dtype = "float32" if cfg.dtype == "float32" else cfg.dtype
        method: dict[str, Any] = {
            "teacher_model": load_model(teacher_spec, options.teacher_model, plugins, torch_dtype=dtype)
        }
    else:
        method = {"reward_funcs": [TRLReward(r, codec, reward_records) for r in rewards]}
    trainer = trainer_class(recipe)(
        model=model,
        **method,
        args=CONFIGS[recipe](cfg, options, output_dir, reward_names=reward_names),
        train_dataset=Dataset.from_list(dataset_rows),
        processing_class=tokenizer,
        callbacks=[JsonlLogCallback(output_dir / "logs.jsonl")],
    )
    trainer.prompt_ids = prompt_ids
    if episodes is not None:
        trainer.rollout_func = episodes  # TRL's hook for custom rollouts: one episode per prompt
    if on_ray:  # the rollout worker: --rollout-engine's backend (the transformers engine for trainer)
        from swiftcore_recipe_rl.ray_actors import placement, start_rollout_worker

        backend = options.rollout_engine if options.rollout_engine != "trainer" else "transformers"
        remote = start_rollout_worker(plugins, backend, cfg, template_spec.name,
                                      timeout=options.rollout_server_timeout)  # fmt: skip
    if remote is not None or options.rollout_engine != "trainer":
        _attach_rollout_engine(
            trainer, options, cfg, plugins, template_spec.name, prompt_ids, prompt_records, engine=remote
        )
    if recipe == "reinforce_pp":
        trainer.baseline = options.reinforce_pp_baseline
    resumed_step = None
    if resume is not None and (resume / "trainer_state.json").is_file():
        resumed_step = int(
            json.loads((resume / "trainer_state.json").read_text(encoding="utf-8")).get("global_step", 0)
        )
    args_record = start_run(
        cfg,
        output_dir,
        spec,
        plugins,
        fresh=resume is None,
        resumed_step=resumed_step,
        template=template_spec,
        rewards=[{"name": r.name, "provider": str(r.spec.provider), "options": r.options} for r in rewards],
        **({"ray": placement(remote, rewards)} if on_ray else {}),
        **{recipe: asdict(options)},
    )
    trainer.checkpoint_extras = {"swiftcore_args.json": json.dumps(args_record, indent=2)}
    return train_and_report(trainer, cfg, output_dir, train_samples=len(dataset_rows), evaluate=False, resume=resume)
