"""swiftcore's training runtime and the ``sft`` recipe, as a plugin (distribution ``swiftcore-train``).

- :mod:`swiftcore_train.trainer`: transformers' ``Trainer`` with atomic checkpoints and resume checks
  (:class:`~swiftcore_train.trainer.SwiftTrainer`), the jsonl log, the loss plot, ``TrainingArguments``.
- :mod:`swiftcore_train.tuners`: full fine-tuning or LoRA (peft), the model spec deciding what is frozen.
- :mod:`swiftcore_train.output_dir`: the output directory rules (never mix runs, never remove an input).
- :mod:`swiftcore_train.run`: what every recipe shares: encoding, the run start, resuming, the report.
- :mod:`swiftcore_train.sft`: the ``sft`` recipe, read top to bottom.
- :mod:`swiftcore_train.hookspecs`: the hooks capability plugins implement to change a run
  (``swiftcore_train_check``, ``swiftcore_train_setup``); :mod:`swiftcore_train.hooks` calls them with a
  :class:`TrainSetup`.

Recipe plugins (preference, RL, heads) depend on this distribution and import from it. Importing this
package is light; the modules that subclass transformers' classes import torch when they are imported.
"""

from swiftcore_train.hooks import TrainSetup

__all__ = ["TrainSetup"]
