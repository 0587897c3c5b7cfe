"""Moved: the training config, the result type, the recipe dispatch and the rewards are the ``swiftcore-train``
distribution's now (package ``swiftcore_train``), with the ``train`` command that fills them.

Importing a name from here fails with where it went, so a plugin written against plugin API 1.3 learns it
instead of getting an attribute error.
"""

from __future__ import annotations

from swiftcore._lazy import moved

__all__: list[str] = []

__getattr__ = moved(
    __name__,
    "the training runtime is the swiftcore-train plugin now; depend on swiftcore-train and import it from there",
    {
        "TrainConfig": "swiftcore_train.config",
        "TrainResult": "swiftcore_train.config",
        "run_training": "swiftcore_train.dispatch",
        "Reward": "swiftcore_train.rewards",
        "load_rewards": "swiftcore_train.rewards",
        "parse_reward_options": "swiftcore_train.rewards",
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
    },
)
