"""swiftcore-train-megatron: the megatron-core training engine (``swiftcore train --engine megatron``).

The Hugging Face checkpoint is loaded through its family's bridge straight into the sharded megatron-core model
(no conversion step), trained with tensor and expert parallelism under ``torchrun`` (gloo on a CPU, NCCL on GPUs),
and every checkpoint is written twice: the per-rank megatron state a killed run resumes from, and the Hugging Face
model the rest of swiftcore (``infer``, ``deploy``, ``eval``) loads.

Modules (this package imports neither torch nor megatron):

- :mod:`~swiftcore_train_megatron.plugin`: the engine's recipes and its ``--tp``/``--pp``/``--ep`` options.
- :mod:`~swiftcore_train_megatron.layout`: the parallel layout, checked before any process group exists.
- :mod:`~swiftcore_train_megatron.schedule`: which samples each rank trains on at each step (transformers' order).
- :mod:`~swiftcore_train_megatron.engine`: the sharded model, one step's loss, gradient reduction and clipping.
- :mod:`~swiftcore_train_megatron.checkpoint`: saving and resuming, and the Hugging Face export of a checkpoint.
- :mod:`~swiftcore_train_megatron.recipe`: the recipe itself, read top to bottom.
- :mod:`~swiftcore_train_megatron.dpo`, :mod:`~swiftcore_train_megatron.kto`, :mod:`~swiftcore_train_megatron.rm`: the
  ``dpo``, ``kto`` and ``rm`` recipes of swiftcore-recipe-preference on this engine (their losses are TRL's).
- :mod:`~swiftcore_train_megatron.grpo`: the ``grpo`` recipe of swiftcore-recipe-rl on this engine (rollouts on rank 0,
  TRL's GRPO loss, full-weight sync through the bridge).
"""

from __future__ import annotations

SWIFTCORE_API = "1.4"  # the plugin API this module was written against (a literal: see docs/writing-a-plugin.md)
