"""Hook implementations of swiftcore-recipe-preference: the preference recipes and their options.

Plain data only: nothing heavy is imported here, so ``swiftcore --help`` stays fast with the plugin installed.
"""

from __future__ import annotations

from typing import Any

from swiftcore.api import RecipeSpec, hookimpl

SWIFTCORE_API = "1.1"

_PKG = "swiftcore_recipe_preference"


@hookimpl
def swiftcore_register_recipes() -> list[RecipeSpec]:
    """``dpo``, ``mpo``, ``kto``, ``cpo``, ``simpo``, ``orpo`` (policy) and ``rm`` (reward model), each on a TRL
    trainer."""
    return [
        RecipeSpec(
            name="dpo",
            run=f"{_PKG}.dpo:run_dpo",
            config=f"{_PKG}.options:DPOOptions",
            description="direct preference optimisation on chosen/rejected pairs (TRL DPOTrainer; "
            "sigmoid, ipo, hinge, ... losses)",
        ),
        RecipeSpec(
            name="mpo",
            run=f"{_PKG}.mpo:run_mpo",
            config=f"{_PKG}.options:MPOOptions",
            description="mixed preference optimisation: DPO with 0.8 sigmoid + 0.2 bco_pair + 1.0 sft losses "
            "(TRL DPOTrainer)",
        ),
        RecipeSpec(
            name="kto",
            run=f"{_PKG}.kto:run_kto",
            config=f"{_PKG}.options:KTOOptions",
            description="KTO on replies labelled desirable / undesirable, paired or not (TRL KTOTrainer); "
            "8 rows a batch unless --batch-size is given",
        ),
        RecipeSpec(
            name="cpo",
            run=f"{_PKG}.reference_free:run_cpo",
            config=f"{_PKG}.options:CPOOptions",
            description="contrastive preference optimisation, no reference model (TRL CPOTrainer)",
        ),
        RecipeSpec(
            name="simpo",
            run=f"{_PKG}.reference_free:run_simpo",
            config=f"{_PKG}.options:SimPOOptions",
            description="SimPO: length-normalised reference-free preference loss with a margin (TRL CPOTrainer)",
        ),
        RecipeSpec(
            name="orpo",
            run=f"{_PKG}.reference_free:run_orpo",
            config=f"{_PKG}.options:ORPOOptions",
            description="odds-ratio preference optimisation: SFT and preference in one loss (TRL ORPOTrainer)",
        ),
        RecipeSpec(
            name="rm",
            run=f"{_PKG}.rm:run_rm",
            config=f"{_PKG}.options:RMOptions",
            description="reward model on chosen/rejected pairs (TRL RewardTrainer, Bradley-Terry loss), "
            "saved for AutoModelForSequenceClassification",
        ),
    ]


@hookimpl
def swiftcore_addoption(parser: Any) -> None:
    """``--beta``, ``--loss-type``, ... each valid with the preference recipes that read it."""
    from swiftcore_recipe_preference.options import add_preference_options

    add_preference_options(parser)
