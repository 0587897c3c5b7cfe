"""Hook implementations of swiftcore-recipe-rl: the ``grpo``, ``rloo``, ``reinforce_pp``, ``gkd`` and ``opd`` recipes
and their options, the ``calculator`` environment, the ``environment`` and ``reward_model`` rewards, and the ``swiftcore
rollout`` command (server mode's rollout server), as plain data."""

from __future__ import annotations

from typing import Any

from swiftcore.api import CommandSpec, EnvironmentSpec, RecipeSpec, RewardSpec, hookimpl

SWIFTCORE_API = "1.4"  # the environment plugin kind (swiftcore_register_environments, EnvironmentSpec) came in 1.4


@hookimpl
def swiftcore_register_recipes() -> list[RecipeSpec]:
    """``grpo`` (group-relative), ``rloo`` (leave-one-out) on TRL's trainers of those names, and ``reinforce_pp``
    (REINFORCE++ advantages on TRL's GRPOTrainer), rewarded by reward plugins; ``gkd`` (on-policy distillation on
    TRL's DistillationTrainer), ``opd`` (on-policy distillation with KL advantages on the ``grpo`` trainer) and ``opsd``
    (``opd`` with the policy itself, shown privileged context, as the teacher)."""
    return [
        RecipeSpec(
            name="grpo",
            run="swiftcore_recipe_rl.recipe:run",
            config="swiftcore_recipe_rl.options:GRPOOptions",
            tasks=("causal_lm",),
            description="online RL with GRPO (loss grpo, bnpo, dr_grpo, dapo) on TRL; rewards by --reward NAME",
        ),
        RecipeSpec(
            name="rloo",
            run="swiftcore_recipe_rl.recipe:run_rloo",
            config="swiftcore_recipe_rl.options:RLOOOptions",
            tasks=("causal_lm",),
            description="online RL with RLOO (leave-one-out baseline) on TRL; rewards by --reward NAME",
        ),
        RecipeSpec(
            name="reinforce_pp",
            run="swiftcore_recipe_rl.recipe:run_reinforce_pp",
            config="swiftcore_recipe_rl.options:ReinforcePPOptions",
            tasks=("causal_lm",),
            description="online RL with REINFORCE++(-baseline): KL-penalised token returns, global normalisation",
        ),
        RecipeSpec(
            name="gkd",
            run="swiftcore_recipe_rl.recipe:run_gkd",
            config="swiftcore_recipe_rl.options:GKDOptions",
            tasks=("causal_lm",),
            description="on-policy distillation (GKD: generalised JSD to --teacher-model) on TRL's DistillationTrainer",
        ),
        RecipeSpec(
            name="opd",
            run="swiftcore_recipe_rl.recipe:run_opd",
            config="swiftcore_recipe_rl.options:OPDOptions",
            tasks=("causal_lm",),
            description="on-policy distillation with KL advantages (log p_teacher - log p_student) on GRPO's loss",
        ),
        RecipeSpec(
            name="opsd",
            run="swiftcore_recipe_rl.recipe:run_opsd",
            config="swiftcore_recipe_rl.options:OPSDOptions",
            tasks=("causal_lm",),
            description="on-policy self-distillation: opd whose teacher is the policy shown the row's privileged "
            "context (--opsd-context)",
        ),
    ]


@hookimpl
def swiftcore_register_environments() -> list[EnvironmentSpec]:
    """``calculator``: the built-in multi-turn environment (``--environment calculator``)."""
    return [
        EnvironmentSpec(
            name="calculator",
            factory="swiftcore_recipe_rl.calculator:Calculator",
            description="a calculator tool (safe arithmetic); rewards a correct final 'answer' reached with a call",
        )
    ]


@hookimpl
def swiftcore_register_rewards() -> list[RewardSpec]:
    """``environment``: the reward an episode's environment gave (``--environment``); ``reward_model``: a reward model
    trained by ``--recipe rm`` scores the prompt and completion."""
    return [
        RewardSpec(
            name="environment",
            function="swiftcore_recipe_rl.environment_reward:environment_reward",
            description="the sum of the --environment's step rewards over the episode (e.g. calculator's)",
        ),
        RewardSpec(
            name="reward_model",
            function="swiftcore_recipe_rl.reward_model:reward_model",
            options=("path",),
            description="the score of a --recipe rm checkpoint (--reward-option reward_model.path=DIR)",
        ),
    ]


@hookimpl
def swiftcore_register_commands() -> list[CommandSpec]:
    """``swiftcore rollout``: serve a policy's rollouts to a trainer (``swiftcore train --rollout-server URL``)."""
    return [
        CommandSpec(
            name="rollout",
            target="swiftcore_recipe_rl.rollout_command:rollout",
            short_help="Serve rollouts to an online-RL trainer that pushes its weights (--rollout-server).",
        )
    ]


@hookimpl
def swiftcore_addoption(parser: Any) -> None:
    """The RL options: the shared rollout/reward ones (``--reward``, ``--num-generations``, ...) for every RL recipe,
    and each recipe's own (``--grpo-loss-type``, ``--rloo-beta``, ``--reinforce-pp-baseline``, ...) for it alone."""
    from swiftcore_recipe_rl.options import add_rl_options

    add_rl_options(parser)
