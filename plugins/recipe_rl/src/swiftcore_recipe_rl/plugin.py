"""Hook implementations of swiftcore-recipe-rl: the ``grpo`` recipe and its options, as plain data."""

from __future__ import annotations

from typing import Any

from swiftcore.api import RecipeSpec, hookimpl

SWIFTCORE_API = "1.2"  # the reward plugin kind (swiftcore_register_rewards, RewardSpec) came in 1.2


@hookimpl
def swiftcore_register_recipes() -> list[RecipeSpec]:
    """``grpo``: group-relative policy optimisation on TRL's GRPOTrainer, rewarded by reward plugins."""
    return [
        RecipeSpec(
            name="grpo",
            run="swiftcore_recipe_rl.recipe:run",
            config="swiftcore_recipe_rl.options:GRPOOptions",
            tasks=("causal_lm",),
            description="online RL with GRPO (loss grpo, bnpo, dr_grpo, dapo) on TRL; rewards by --reward NAME",
        )
    ]


@hookimpl
def swiftcore_addoption(parser: Any) -> None:
    """The ``grpo`` options (``--reward``, ``--num-generations``, ``--grpo-loss-type``, ...), for that recipe only."""
    from swiftcore_recipe_rl.options import add_grpo_options

    add_grpo_options(parser)
