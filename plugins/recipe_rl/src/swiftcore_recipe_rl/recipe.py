"""The RL recipes ``grpo``, ``rloo``, ``reinforce_pp``, ``gkd`` and ``opd``: one path (:func:`run_recipe`), read top
to bottom like the core's SFT recipe; the recipes differ only in their TRL config (:data:`CONFIGS`) and trainer class
(:func:`~swiftcore_recipe_rl.trainer.trainer_class`).

A run is planned once, then executed. The plan step (:func:`~swiftcore_recipe_rl.plan.plan_run`) checks everything
that can be checked before training (model, template, rewards and their options, every prompt row, the columns the
rewards read, prompt lengths) and encodes the prompts, so a bad input fails in seconds; its plan is plain data. The
executor trains it in this process (:func:`~swiftcore_recipe_rl.execute.execute`), or with ``--ray`` places the
trainer, the rollout engine and the rewards in Ray actors and hands the plan to the trainer's
(:func:`~swiftcore_recipe_rl.ray_actors.run_on_ray`). The loss, advantages and rollouts are TRL 1.16's
``GRPOTrainer`` / ``RLOOTrainer`` (see :mod:`swiftcore_recipe_rl.trainer`); swiftcore supplies the model loading and
LoRA (the family's targets and exclusions), the template-encoded prompts, the rewards, the output directory, the
``args.json`` manifest and atomic checkpoints.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swiftcore_recipe_rl.options import (
    GKDOptions,
    GRPOOptions,
    OPDOptions,
    OPSDOptions,
    ReinforcePPOptions,
    RLOOOptions,
    RolloutOptions,
    SamplingOptions,
)

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = [
    "CONFIGS",
    "TRL_LOSS",
    "gkd_config",
    "grpo_config",
    "opd_config",
    "reinforce_pp_config",
    "rloo_config",
    "run",
    "run_gkd",
    "run_opd",
    "run_opsd",
    "run_recipe",
    "run_reinforce_pp",
    "run_rloo",
]


def _rl_config(
    cfg: Any, options: SamplingOptions, output_dir: Path, *, reward_names: list[str], args_class: type, **method: Any
) -> Any:
    """A TRL ``GRPOConfig``/``RLOOConfig``/``DistillationConfig`` from the common options, the shared sampling (and,
    for the reward-driven recipes, rollout) options and ``method``'s.

    ``--batch-size`` counts prompts per device and step: each brings ``--num-generations`` completions (one for
    ``gkd``), so TRL's per-device batch (which counts completions) is their product and always holds whole groups.
    """
    from swiftcore_train import training_arguments

    from swiftcore_recipe_rl.shaping import extra_rewards

    rollout: dict[str, Any] = {}
    if isinstance(options, RolloutOptions):
        weights = options.weights()
        rollout = dict(
            num_generations=options.num_generations,
            num_iterations=options.num_iterations,
            mask_truncated_completions=options.mask_truncated_completions,
            # the --reward functions', then those the options add (shaping.extra_rewards), each of weight 1
            reward_weights=[weights.get(name, 1.0) for name in reward_names] + [1.0] * len(extra_rewards(options)),
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


#: ``--grpo-loss-type`` -> TRL's ``(loss_type, importance_sampling_level)``: GSPO is TRL's per-sequence mean with
#: the sequence-level ratio; FIPO is TRL's ``dapo`` fed future-KL-weighted advantages (the trainer's ``fipo``).
TRL_LOSS = {"gspo": ("grpo", "sequence"), "fipo": ("dapo", "token")}


def grpo_config(cfg: Any, options: GRPOOptions, output_dir: Path, *, reward_names: list[str]) -> Any:
    """TRL's ``GRPOConfig`` for ``--recipe grpo`` (the loss variant mapped by :data:`TRL_LOSS`)."""
    from trl import GRPOConfig

    loss_type, level = TRL_LOSS.get(options.grpo_loss_type, (options.grpo_loss_type, "token"))
    return _rl_config(
        cfg, options, output_dir, reward_names=reward_names, args_class=GRPOConfig,
        loss_type=loss_type, importance_sampling_level=level, beta=options.grpo_beta, epsilon=options.grpo_epsilon,
        epsilon_high=options.grpo_epsilon_high, delta=options.grpo_delta, scale_rewards=options.scale_rewards,
        sapo_temperature_pos=options.sapo_temperature_pos, sapo_temperature_neg=options.sapo_temperature_neg,
        cast_lm_head_to_fp32=options.fp32_lm_head,
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


def opd_config(cfg: Any, options: OPDOptions, output_dir: Path, *, reward_names: list[str]) -> Any:
    """TRL's ``GRPOConfig`` for ``--recipe opd``: the ``grpo`` recipe's (opd is GRPO's loss on KL advantages); without
    ``--reward`` its one reward function is :func:`~swiftcore_recipe_rl.execute.no_reward`, of weight 1."""
    return grpo_config(cfg, options, output_dir, reward_names=list(reward_names) or ["no_reward"])


#: Each recipe's TRL config builder.
CONFIGS: dict[str, Callable[..., Any]] = {
    "grpo": grpo_config,
    "opd": opd_config,
    "opsd": opd_config,
    "rloo": rloo_config,
    "reinforce_pp": reinforce_pp_config,
    "gkd": gkd_config,
}


def run(cfg: Any, plugins: PluginSet, options: GRPOOptions) -> Any:
    """The ``grpo`` recipe: sample ``--num-generations`` completions per prompt, score them with the
    ``--reward`` functions, and optimise the policy with TRL's GRPO loss of ``--grpo-loss-type``."""
    return run_recipe("grpo", cfg, plugins, options)


def run_rloo(cfg: Any, plugins: PluginSet, options: RLOOOptions) -> Any:
    """The ``rloo`` recipe: TRL's RLOO, each completion's advantage its reward minus the mean reward of the other
    completions of its prompt (leave-one-out), a clipped sequence-level ratio, the KL penalty in the reward."""
    return run_recipe("rloo", cfg, plugins, options)


def run_reinforce_pp(cfg: Any, plugins: PluginSet, options: ReinforcePPOptions) -> Any:
    """The ``reinforce_pp`` recipe: REINFORCE++(-baseline), token-level KL-penalised returns normalised over the
    batch, PPO's clipped per-token loss (see :mod:`swiftcore_recipe_rl.trainer`)."""
    return run_recipe("reinforce_pp", cfg, plugins, options)


def run_gkd(cfg: Any, plugins: PluginSet, options: GKDOptions) -> Any:
    """The ``gkd`` recipe: on-policy distillation; the student samples a completion per prompt and learns to match
    the ``--teacher-model``'s next-token distributions on it (generalised JSD of ``--gkd-beta``, TRL's
    DistillationTrainer)."""
    return run_recipe("gkd", cfg, plugins, options)


def run_opd(cfg: Any, plugins: PluginSet, options: OPDOptions) -> Any:
    """The ``opd`` recipe: on-policy distillation with KL advantages; the student samples, the ``--teacher-model``
    scores each sampled token, and GRPO's loss trains on the per-token advantages ``log p_teacher - log p_student``
    (plus ``--opd-reward-weight`` times the reward's; see :mod:`swiftcore_recipe_rl.trainer`)."""
    return run_recipe("opd", cfg, plugins, options)


def run_opsd(cfg: Any, plugins: PluginSet, options: OPSDOptions) -> Any:
    """The ``opsd`` recipe: on-policy self-distillation; ``opd`` whose teacher is the policy itself, scoring each
    sampled token after the prompt with the row's privileged ``--opsd-context`` (see
    :mod:`swiftcore_recipe_rl.opsd`)."""
    return run_recipe("opsd", cfg, plugins, options)


def run_recipe(recipe: str, cfg: Any, plugins: PluginSet, options: SamplingOptions) -> Any:
    """Run the RL recipe ``recipe`` (a key of :data:`CONFIGS`): plan it (every check, the prompts encoded), then
    train the plan in this process or, with ``--ray``, on Ray; the run's :class:`~swiftcore_train.TrainResult`."""
    from swiftcore_recipe_rl.plan import plan_run

    plan = plan_run(recipe, cfg, plugins, options)
    if plan.on_ray:
        from swiftcore_recipe_rl.ray_actors import run_on_ray

        return run_on_ray(plan, plugins)
    from swiftcore_recipe_rl.execute import execute

    return execute(plan, plugins)
