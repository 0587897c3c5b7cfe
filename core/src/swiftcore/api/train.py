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
        **dict.fromkeys(("TrainConfig", "TrainResult"), "swiftcore_train.config"),
        "run_training": "swiftcore_train.dispatch",
        **dict.fromkeys(("Reward", "load_rewards", "parse_reward_options"), "swiftcore_train.rewards"),
        **dict.fromkeys(("JsonlLogCallback", "SwiftTrainer", "training_arguments"), "swiftcore_train.trainer"),
        **dict.fromkeys(("apply_tuner", "lora_config", "trainable_summary"), "swiftcore_train.tuners"),
        **dict.fromkeys(
            ("check_template_fits_tokenizer", "encode_records", "generation_defaults", "start_run", "train_and_report"),
            "swiftcore_train.run",
        ),
    },
)
