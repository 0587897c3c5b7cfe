"""Supervised fine-tuning on transformers' Trainer: config, tuners, atomic checkpoints, the recipe.

``swiftcore.train.config`` is import-light; the rest imports torch and transformers.
"""

from swiftcore.train.config import TrainConfig, load_config_file

__all__ = ["TrainConfig", "load_config_file"]
