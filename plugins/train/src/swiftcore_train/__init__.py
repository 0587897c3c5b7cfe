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

from __future__ import annotations

from swiftcore.api import lazy_exports

__all__ = [
    "DEFAULT_LOSS_CHUNK_SIZE",
    "MANIFEST",
    "OUTPUT_PATTERNS",
    "GenerationEvalOptions",
    "JsonlLogCallback",
    "Reward",
    "SwiftTrainer",
    "TrainConfig",
    "TrainResult",
    "TrainSetup",
    "answers_match",
    "apply_tuner",
    "check_recipe_fits_model",
    "check_training",
    "chunked_token_logps",
    "encode_records",
    "extract_answer",
    "generation_defaults",
    "is_main_process",
    "label_logps",
    "last_checkpoint",
    "load_rewards",
    "load_template",
    "load_train_val_records",
    "lora_config",
    "parse_reward_options",
    "plan_output_dir",
    "plot_loss_curve",
    "resolve_resume",
    "run_inputs",
    "run_training",
    "sample_encoder",
    "setup_training",
    "start_run",
    "train_and_report",
    "trainable_summary",
    "training_arguments",
    "trim_log",
    "trainer_head_reason",
    "use_chunked_lm_head",
]

#: name -> the submodule that defines it, imported on first use (importing the package stays light).
_WHERE = {
    "TrainConfig": "config",
    "TrainResult": "config",
    "run_training": "dispatch",
    "GenerationEvalOptions": "generation_eval",
    "TrainSetup": "hooks",
    "check_training": "hooks",
    "setup_training": "hooks",
    "DEFAULT_LOSS_CHUNK_SIZE": "loss",
    "chunked_token_logps": "loss",
    "label_logps": "loss",
    "trainer_head_reason": "loss",
    "use_chunked_lm_head": "loss",
    "MANIFEST": "output_dir",
    "OUTPUT_PATTERNS": "output_dir",
    "plan_output_dir": "output_dir",
    "last_checkpoint": "output_dir",
    "trim_log": "output_dir",
    "Reward": "rewards",
    "answers_match": "rewards",
    "extract_answer": "rewards",
    "load_rewards": "rewards",
    "parse_reward_options": "rewards",
    "check_recipe_fits_model": "run",
    "encode_records": "run",
    "generation_defaults": "run",
    "is_main_process": "run",
    "load_template": "run",
    "load_train_val_records": "run",
    "resolve_resume": "run",
    "run_inputs": "run",
    "sample_encoder": "run",
    "start_run": "run",
    "train_and_report": "run",
    "JsonlLogCallback": "trainer",
    "SwiftTrainer": "trainer",
    "plot_loss_curve": "trainer",
    "training_arguments": "trainer",
    "apply_tuner": "tuners",
    "lora_config": "tuners",
    "trainable_summary": "tuners",
}
__getattr__ = lazy_exports(__name__, _WHERE)
