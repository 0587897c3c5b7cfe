"""What the core gives a training recipe: the common config, the result type, the dispatch, the rewards.

A recipe (:class:`swiftcore.api.RecipeSpec`) is ``run(cfg, plugins, options) -> TrainResult``. The runtime
recipes share — the trainer with atomic checkpoints, the tuners, the run start and report — is the
``swiftcore-train`` distribution's (package ``swiftcore_train``), whose ``sft`` recipe
(``swiftcore_train.sft.run_sft``) reads top to bottom as the example; a recipe plugin depends on it.
"""

from __future__ import annotations

from typing import Any

from swiftcore.train.config import TrainConfig
from swiftcore.train.rewards import Reward, load_rewards, parse_reward_options
from swiftcore.train.run import TrainResult, run_training

__all__ = ["Reward", "TrainConfig", "TrainResult", "load_rewards", "parse_reward_options", "run_training"]

#: Names this module had before the training runtime became the swiftcore-train plugin: name -> new module.
_MOVED = {
    "JsonlLogCallback": "swiftcore_train.trainer",
    "SwiftTrainer": "swiftcore_train.trainer",
    "training_arguments": "swiftcore_train.trainer",
    "apply_tuner": "swiftcore_train.tuners",
    "lora_config": "swiftcore_train.tuners",
    "trainable_summary": "swiftcore_train.tuners",
    "check_template_fits_tokenizer": "swiftcore_train.run",
    "encode_records": "swiftcore_train.run",
    "generation_defaults": "swiftcore_train.run",
    "start_run": "swiftcore_train.run",
    "train_and_report": "swiftcore_train.run",
}


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        raise ImportError(
            f"swiftcore.api.train.{name} moved to {_MOVED[name]}.{name}: the training runtime is the swiftcore-train "
            "plugin now; depend on swiftcore-train and import it from there"
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
