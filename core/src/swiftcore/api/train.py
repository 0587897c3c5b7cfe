"""What a training recipe is written with: the common config, the trainer, and the run helpers.

A recipe (:class:`swiftcore.api.RecipeSpec`) is ``run(cfg, plugins, options) -> TrainResult``; the SFT
recipe (``swiftcore.train.run.run_sft``) reads top to bottom as the example.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from swiftcore.train.config import TrainConfig
from swiftcore.train.run import (
    TrainResult,
    check_template_fits_tokenizer,
    encode_records,
    generation_defaults,
    run_training,
    start_run,
    train_and_report,
)
from swiftcore.train.tuners import apply_tuner, lora_config, trainable_summary

if TYPE_CHECKING:  # at run time they come from __getattr__ below, on first use
    from swiftcore.train.trainer import JsonlLogCallback, SwiftTrainer, training_arguments

__all__ = [
    "JsonlLogCallback",
    "SwiftTrainer",
    "TrainConfig",
    "TrainResult",
    "apply_tuner",
    "check_template_fits_tokenizer",
    "encode_records",
    "generation_defaults",
    "lora_config",
    "run_training",
    "start_run",
    "trainable_summary",
    "train_and_report",
    "training_arguments",
]

# Rewards for online RL recipes (issue 19): load ``--reward`` names, call them without ever failing a run.
from swiftcore.train.rewards import Reward, load_rewards, parse_reward_options

__all__ += ["Reward", "load_rewards", "parse_reward_options"]

#: Names of ``swiftcore.train.trainer``, which subclasses transformers' ``Trainer`` and so imports torch and
#: transformers: resolved on first use (PEP 562), so importing this module stays light like the rest of the API.
_TRAINER_NAMES = ("JsonlLogCallback", "SwiftTrainer", "training_arguments")


def __getattr__(name: str) -> Any:
    if name in _TRAINER_NAMES:
        from swiftcore.train import trainer

        return getattr(trainer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
