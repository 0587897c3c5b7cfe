"""The training contract: the common config, the rewards, and running the recipe a plugin registers.

The trainer, tuners and the ``sft`` recipe are the swiftcore-train plugin's (``swiftcore_train``). Everything
here is import-light: no torch, no transformers.
"""

from swiftcore.train.config import TrainConfig, load_config_file

__all__ = ["TrainConfig", "load_config_file"]
