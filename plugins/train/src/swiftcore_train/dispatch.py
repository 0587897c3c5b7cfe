"""``run_training``: run the recipe ``cfg.recipe`` names, from whichever plugin registers it (``sft`` is this
distribution's; the heads, preference and RL recipes are other plugins')."""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any

from swiftcore.api import SwiftcoreError, resolve
from swiftcore_train.config import DEFAULT_ENGINE, TrainConfig, TrainResult

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = ["run_training"]

log = logging.getLogger("swiftcore.train")


def run_training(cfg: TrainConfig, plugins: PluginSet) -> TrainResult:
    """Run ``cfg.recipe``: a :class:`~swiftcore.specs.RecipeSpec` some plugin registers (``sft``: swiftcore-train).

    The recipe's own options (``cfg.recipe_options``) are built into its config dataclass first, when it
    declares one, so a bad value fails before anything is loaded. Options other plugins add to the recipe
    (``--sequence-parallel-size`` to the head recipes) are not fields of that dataclass: they are left out of
    it and stay in ``cfg.recipe_options``, where those plugins read them (swiftcore-train's hooks).

    Raises:
        SwiftcoreError: no plugin provides the recipe (with close matches), or its options are invalid.
    """
    cfg.validate()
    spec = plugins.registry.find("recipe", cfg.recipe)
    if spec is None and cfg.engine != DEFAULT_ENGINE:
        raise SwiftcoreError(_no_engine_message(cfg, plugins))
    if spec is None and cfg.task != "causal_lm":
        return _run_head_recipe(cfg, plugins)  # a head plugin that registers no RecipeSpec (HeadSpec.recipe)
    spec = spec or plugins.registry.get("recipe", cfg.recipe)  # raises, naming what is available
    options: Any = dict(cfg.recipe_options)
    if spec.config:
        config_cls = resolve(spec.config, what=f"config of recipe {spec.name!r} ({spec.provider})")
        own = {f.name for f in dataclasses.fields(config_cls)} if dataclasses.is_dataclass(config_cls) else None
        try:
            options = config_cls(**{k: v for k, v in options.items() if own is None or k in own})
        except (TypeError, ValueError) as exc:
            raise SwiftcoreError(f"recipe {spec.name!r} ({spec.provider}): invalid options: {exc}") from exc
    run = resolve(spec.run, what=f"recipe {spec.name!r} ({spec.provider})")
    log.info("recipe %s (%s)", spec.name, spec.provider)
    return run(cfg, plugins, options)


def _run_head_recipe(cfg: TrainConfig, plugins: PluginSet) -> TrainResult:
    """``--task HEAD`` for a head whose plugin names its training function in ``HeadSpec.recipe``."""
    head = plugins.registry.get("head", cfg.task)
    if head.recipe is None:
        raise SwiftcoreError(
            f"head {head.name!r} ({head.provider}) declares no training recipe (HeadSpec.recipe); "
            "it can be served but not trained by swiftcore: use a plugin whose head has one"
        )
    return resolve(head.recipe, what=f"recipe of head {head.name!r} ({head.provider})")(cfg, plugins, head)


def _no_engine_message(cfg: TrainConfig, plugins: PluginSet) -> str:
    """Why ``--engine`` cannot run this recipe: what the engine does train, or that no plugin provides it."""
    base = cfg.recipe.removesuffix(f".{cfg.engine}")
    on_engine = sorted(
        s.name.removesuffix(f".{cfg.engine}")
        for s in plugins.registry.all("recipe")
        if s.name.endswith(f".{cfg.engine}")
    )
    if on_engine:
        return (
            f"--engine {cfg.engine}: recipe {base!r} is not supported by this engine (it trains "
            f"{', '.join(on_engine)}); run {base!r} on the default engine (drop --engine), or pick one of those recipes"
        )
    return (
        f"--engine {cfg.engine}: no installed plugin provides this engine (no recipe '{base}.{cfg.engine}'); "
        "for megatron-core: pip install swiftcore-train-megatron"
    )
