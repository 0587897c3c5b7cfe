"""``run_training``: run the recipe ``cfg.recipe`` names, from whichever plugin registers it (``sft`` is this
distribution's; the heads, preference and RL recipes are other plugins')."""

from __future__ import annotations

import logging
from typing import Any

from swiftcore.api import SwiftcoreError, resolve
from swiftcore_train.config import TrainConfig, TrainResult

__all__ = ["run_training"]

log = logging.getLogger("swiftcore.train")


def run_training(cfg: TrainConfig, plugins: Any) -> TrainResult:
    """Run ``cfg.recipe``: a :class:`~swiftcore.specs.RecipeSpec` some plugin registers (``sft``: swiftcore-train).

    The recipe's own options (``cfg.recipe_options``) are built into its config dataclass first, when it
    declares one, so a bad value fails before anything is loaded.

    Raises:
        SwiftcoreError: no plugin provides the recipe (with close matches), or its options are invalid.
    """
    cfg.validate()
    spec = plugins.registry.find("recipe", cfg.recipe)
    if spec is None and cfg.task != "causal_lm":
        return _run_head_recipe(cfg, plugins)  # a head plugin that registers no RecipeSpec (HeadSpec.recipe)
    spec = spec or plugins.registry.get("recipe", cfg.recipe)  # raises, naming what is available
    options: Any = dict(cfg.recipe_options)
    if spec.config:
        config_cls = resolve(spec.config, what=f"config of recipe {spec.name!r} ({spec.provider})")
        try:
            options = config_cls(**options)
        except (TypeError, ValueError) as exc:
            raise SwiftcoreError(f"recipe {spec.name!r} ({spec.provider}): invalid options: {exc}") from exc
    run = resolve(spec.run, what=f"recipe {spec.name!r} ({spec.provider})")
    log.info("recipe %s (%s)", spec.name, spec.provider)
    return run(cfg, plugins, options)


def _run_head_recipe(cfg: TrainConfig, plugins: Any) -> TrainResult:
    """``--task HEAD`` for a head whose plugin names its training function in ``HeadSpec.recipe``."""
    head = plugins.registry.get("head", cfg.task)
    if head.recipe is None:
        raise SwiftcoreError(
            f"head {head.name!r} ({head.provider}) declares no training recipe (HeadSpec.recipe); "
            "it can be served but not trained by swiftcore: use a plugin whose head has one"
        )
    return resolve(head.recipe, what=f"recipe of head {head.name!r} ({head.provider})")(cfg, plugins, head)
