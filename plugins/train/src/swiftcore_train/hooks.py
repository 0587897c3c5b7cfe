"""Calling the training hooks (:mod:`swiftcore_train.hookspecs`) from a recipe: what ``sft`` and the head recipes share.

A recipe calls :func:`check_training` before anything heavy loads and :func:`setup_training` right before it
instantiates its Trainer, then builds the Trainer from the :class:`TrainSetup` the capabilities may have changed.
Nothing here imports torch or transformers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from swiftcore.api import PluginSet
    from swiftcore_train.config import TrainConfig

__all__ = ["TrainSetup", "check_training", "setup_training"]


@dataclass
class TrainSetup:
    """What a run is about to train with; ``swiftcore_train_setup`` implementations change its fields in place.

    Attributes:
        kind: ``"sft"``, or the head task of a swiftcore-heads recipe (``"embedding"``, ...).
        model: the model to train (the tuner applied; a head recipe's ``HeadModel``, its backbone as ``.decoder``).
        collator: the data collator, ``collator(samples) -> batch``.
        trainer_class: what the Trainer is instantiated from, with ``Trainer``'s keyword arguments (a class, or a
            factory such as a ``functools.partial`` of one).
        training_args: the ``transformers.TrainingArguments``.
        tokenizer: the tokenizer (the Trainer's ``processing_class``).
        cfg: the run's :class:`~swiftcore_train.config.TrainConfig`.
        options: the recipe's option values by destination name, those other plugins added included.
        callbacks: the ``transformers.TrainerCallback`` objects the Trainer gets; append yours.
        multimodal: whether the data holds image or audio samples.
        token_weighted_loss: whether the recipe sets its token-weighted loss on the Trainer (``sft``: one step's
            loss is the mean over all its label tokens, across gradient accumulation); a capability whose trainer
            weights the step itself turns it off. Always False for the head recipes, whose trainer has its own loss.
    """

    kind: str
    model: Any
    collator: Callable[[Any], Any]
    trainer_class: Callable[..., Any]
    training_args: Any
    tokenizer: Any
    cfg: TrainConfig
    options: Mapping[str, Any] = field(default_factory=dict)
    callbacks: list[Any] = field(default_factory=list)
    multimodal: bool = False
    token_weighted_loss: bool = True


def _hook(plugins: PluginSet, name: str) -> Any:
    # None when this plugin set does not declare the hook (swiftcore-train's plugin not registered in it, e.g. a
    # set built by hand around a recipe function): then no capability can implement it either.
    return getattr(plugins.pm.hook, name, None)


def check_training(plugins: PluginSet, cfg: TrainConfig, options: Mapping[str, Any] | None, *, kind: str) -> None:
    """Call every ``swiftcore_train_check``: the capabilities refuse what they cannot train, before anything loads.

    Args:
        plugins: the loaded plugin set the recipe runs with.
        cfg: the run's :class:`~swiftcore_train.config.TrainConfig` (``cfg.model`` is the checkpoint checked).
        options: the recipe's option values (``cfg.recipe_options`` or the ``options`` a recipe gets).
        kind: ``"sft"`` or the head task.

    Raises:
        SwiftcoreError: a capability refuses the run.
    """
    hook = _hook(plugins, "swiftcore_train_check")
    if hook is not None:
        hook(cfg=cfg, options=dict(options or {}), model_dir=str(cfg.model), kind=kind)


def setup_training(plugins: PluginSet, setup: TrainSetup) -> TrainSetup:
    """Call every ``swiftcore_train_setup`` on ``setup`` and return it, for the recipe to build its Trainer from.

    Raises:
        SwiftcoreError: a capability refuses the run (e.g. a model it cannot split).
    """
    hook = _hook(plugins, "swiftcore_train_setup")
    if hook is not None:
        hook(setup=setup)
    return setup
