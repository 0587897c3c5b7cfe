"""``run_training``: run the recipe ``cfg.recipe`` names, from whichever plugin registers it.

The core owns the dispatch and the result type every recipe returns; the recipes themselves and the
training runtime they share (trainer, tuners, output directory, run start) are the ``swiftcore-train``
distribution's (``swiftcore_train``) and of other recipe plugins.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swiftcore.errors import SwiftcoreError
from swiftcore.train.config import TrainConfig

__all__ = ["run_training", "TrainResult", "SFT_DISTRIBUTION"]

log = logging.getLogger("swiftcore.train")

#: The distribution that ships the default ``sft`` recipe and the runtime other recipes build on.
SFT_DISTRIBUTION = "swiftcore-train"


@dataclass
class TrainResult:
    """Where a run left its outputs."""

    output_dir: Path
    last_checkpoint: Path | None
    log_file: Path
    plot_file: Path | None
    train_samples: int
    global_step: int
    final_loss: float | None


def run_training(cfg: TrainConfig, plugins: Any) -> TrainResult:
    """Run ``cfg.recipe``: a :class:`~swiftcore.specs.RecipeSpec` some plugin registers (``sft``: swiftcore-train).

    The recipe's own options (``cfg.recipe_options``) are built into its config dataclass first, when it
    declares one, so a bad value fails before anything is loaded.

    Raises:
        SwiftcoreError: no plugin provides the recipe (with close matches, or for ``sft`` what to install),
            or its options are invalid.
    """
    from swiftcore._lazy import resolve

    cfg.validate()
    spec = plugins.registry.find("recipe", cfg.recipe)
    if spec is None and cfg.task != "causal_lm":
        return _run_head_recipe(cfg, plugins)  # a head plugin that registers no RecipeSpec (HeadSpec.recipe)
    if spec is None and cfg.recipe == "sft" and not _declared_anywhere(plugins, "sft"):
        raise SwiftcoreError(
            f"no loaded plugin provides the recipe 'sft' (supervised fine-tuning): it is the {SFT_DISTRIBUTION} "
            f"plugin's; install it (pip install {SFT_DISTRIBUTION}), or pick another recipe with --recipe "
            "(`swiftcore recipes` lists the installed ones)"
        )
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


def _declared_anywhere(plugins: Any, recipe: str) -> bool:
    """Whether any installed plugin declares ``recipe`` (loaded or not: the registry's message covers that)."""
    return any(recipe in info.capabilities.get("recipe", ()) for info in plugins.infos.values())


def _run_head_recipe(cfg: TrainConfig, plugins: Any) -> TrainResult:
    """``--task HEAD`` for a head whose plugin names its training function in ``HeadSpec.recipe``."""
    from swiftcore._lazy import resolve

    head = plugins.registry.get("head", cfg.task)
    if head.recipe is None:
        raise SwiftcoreError(
            f"head {head.name!r} ({head.provider}) declares no training recipe (HeadSpec.recipe); "
            "it can be served but not trained by swiftcore: use a plugin whose head has one"
        )
    return resolve(head.recipe, what=f"recipe of head {head.name!r} ({head.provider})")(cfg, plugins, head)
