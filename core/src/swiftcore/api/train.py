"""What a training recipe is written with: the common config, the trainer, and the run helpers.

A recipe (:class:`swiftcore.api.RecipeSpec`) is ``run(cfg, plugins, options) -> TrainResult``; the SFT
recipe (``swiftcore.train.run.run_sft``) reads top to bottom as the example.
"""

from __future__ import annotations

from swiftcore.train.config import TrainConfig
from swiftcore.train.run import TrainResult, encode_records, start_run, train_and_report
from swiftcore.train.trainer import JsonlLogCallback, SwiftTrainer, training_arguments
from swiftcore.train.tuners import lora_config, trainable_summary

__all__ = [
    "JsonlLogCallback",
    "SwiftTrainer",
    "TrainConfig",
    "TrainResult",
    "encode_records",
    "lora_config",
    "start_run",
    "trainable_summary",
    "train_and_report",
    "training_arguments",
]
