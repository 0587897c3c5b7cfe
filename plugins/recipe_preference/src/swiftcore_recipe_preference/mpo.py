"""``run_mpo``: the ``mpo`` recipe, Mixed Preference Optimization on the ``dpo`` recipe's trainer.

MPO (Wang et al. 2024, "Enhancing the Reasoning Ability of Multimodal Large Language Models via Mixed Preference
Optimization", arXiv:2411.10442) is DPO whose loss is a weighted sum of three: the DPO preference loss (TRL's
``sigmoid``), BCO's quality loss on each reply's own log-ratio (``bco_pair``) and the chosen reply's NLL (``sft``),
weighted 0.8, 0.2 and 1.0. TRL 1.16 computes it in ``DPOTrainer`` itself (``DPOConfig.loss_type`` as a list with
``loss_weights``), so the recipe is the ``dpo`` recipe with :class:`~swiftcore_recipe_preference.options.MPOOptions`:
same data, encoding, reference model and checkpoints; only the loss's defaults differ.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = ["run_mpo"]

log = logging.getLogger("swiftcore.preference")


def run_mpo(cfg: Any, plugins: PluginSet, options: Any = None) -> Any:
    """The ``mpo`` recipe (:class:`swiftcore.api.RecipeSpec`): MPO-train ``cfg.model`` on ``cfg.dataset`` pairs.

    Args:
        cfg: the core's training options (:class:`~swiftcore_train.config.TrainConfig`).
        plugins: the loaded plugins.
        options: :class:`~swiftcore_recipe_preference.options.MPOOptions` (MPO's defaults when None).

    Returns:
        :class:`~swiftcore_train.config.TrainResult`, with checkpoints as the ``dpo`` recipe writes them.
    """
    from swiftcore_recipe_preference.dpo import run_dpo
    from swiftcore_recipe_preference.options import MPOOptions

    options = options if isinstance(options, MPOOptions) else MPOOptions(**(options or {}))
    weights = options.loss_weights or (1.0,) * len(options.loss_type)
    mix = " + ".join(f"{w:g}*{t}" for t, w in zip(options.loss_type, weights, strict=True))
    log.info("recipe mpo: DPOTrainer with loss %s (beta %g)", mix, options.beta)
    return run_dpo(cfg, plugins, options, recipe="mpo")
