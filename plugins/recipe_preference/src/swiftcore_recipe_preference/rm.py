"""``run_rm``: the ``rm`` recipe, TRL's RewardTrainer (Bradley-Terry loss) on pairs encoded by swiftcore's templates.

The model is transformers' ``*ForSequenceClassification`` of the family with one output (``num_labels=1``):
the score layer reads the last real token. Every checkpoint is that model in full (a LoRA adapter is merged
into a copy first), so ``AutoModelForSequenceClassification.from_pretrained(checkpoint)`` loads it as is.

Why not the heads plugin's ``classification`` head: its model is swiftcore's own module (decoder + pooling +
score), not a ``PreTrainedModel`` RewardTrainer can drive, and the plugin's training API is internal to it.
The saved format is the same one its classification checkpoints use for families with a transformers class.
"""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swiftcore.api import SwiftcoreError

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = ["build_reward_trainer", "load_reward_model", "reward_trainer_class", "run_rm"]

log = logging.getLogger("swiftcore.preference")


def load_reward_model(cfg: Any, spec: Any, tokenizer: Any) -> Any:
    """``AutoModelForSequenceClassification`` with ``num_labels=1`` on ``cfg.model``'s weights.

    Raises:
        SwiftcoreError: transformers has no sequence-classification class for the family.
    """
    import torch
    from transformers import AutoModelForSequenceClassification

    dtype = torch.float32 if cfg.dtype == "float32" else getattr(torch, cfg.dtype)
    try:
        model = AutoModelForSequenceClassification.from_pretrained(cfg.model, num_labels=1, dtype=dtype)
    except ValueError as exc:
        if "Unrecognized configuration class" not in str(exc):
            raise
        raise SwiftcoreError(
            f"--recipe rm: transformers has no sequence-classification model for {spec.name!r} "
            f"({spec.provider}), so a reward model of it could not be loaded by AutoModelForSequenceClassification; "
            "train the reward model on a family that has one"
        ) from None
    # The score reads the last token that is not padding, so the model must know the pad id.
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.config.pad_token_id = tokenizer.pad_token_id
    return model


def reward_trainer_class() -> Any:
    """TRL's RewardTrainer with swiftcore's checkpointing, saving merged ``*ForSequenceClassification`` models."""
    from trl import RewardTrainer

    from swiftcore_recipe_preference.common import swift_trl_trainer

    class PreferenceRewardTrainer(swift_trl_trainer(RewardTrainer)):  # type: ignore[misc]
        """RewardTrainer whose checkpoints ``AutoModelForSequenceClassification`` loads directly."""

        def _save(self, output_dir: str | None = None, state_dict: Any = None) -> None:
            if not self.args.should_save:
                return
            out = Path(output_dir or self.args.output_dir)
            out.mkdir(parents=True, exist_ok=True)
            model = self.accelerator.unwrap_model(self.model)
            if hasattr(model, "merge_and_unload"):
                # A copy is merged so that training goes on with the adapter; the checkpoint needs no peft.
                model = copy.deepcopy(model).merge_and_unload()
            model.save_pretrained(out, safe_serialization=True)
            if self.processing_class is not None:
                self.processing_class.save_pretrained(out)

    return PreferenceRewardTrainer


def build_reward_trainer(
    cfg: Any, options: Any, train: list[dict], val: list[dict], prepared: Any, output_dir: Path
) -> Any:
    """The configured :func:`reward_trainer_class` instance for encoded ``train`` / ``val`` samples."""
    import torch
    from datasets import Dataset
    from swiftcore_train import JsonlLogCallback, lora_config, trainable_summary
    from trl import RewardConfig

    from swiftcore_recipe_preference.common import trl_arguments

    torch.manual_seed(cfg.seed)
    model = load_reward_model(cfg, prepared.spec, prepared.tokenizer)
    # SEQ_CLS makes peft train (and save) the new score layer in full beside the adapter.
    # ``all-linear`` is resolved on the backbone (as for SFT: routers never adapted, fused experts adapted), so the
    # score layer, trained in full, is not also a LoRA target.
    backbone = getattr(model, model.base_model_prefix, model)
    peft_config = lora_config(prepared.spec, cfg, task_type="SEQ_CLS", model=backbone) if cfg.tuner == "lora" else None
    args = trl_arguments(
        RewardConfig,
        cfg,
        output_dir,
        evaluate=bool(val),
        max_length=None,  # applied when encoding (--max-length / --truncation)
        center_rewards_coefficient=options.center_rewards_coefficient,
        disable_dropout=True,
        model_init_kwargs=None,
    )
    trainer = reward_trainer_class()(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(train),
        eval_dataset=Dataset.from_list(val) if val else None,
        processing_class=prepared.tokenizer,
        callbacks=[JsonlLogCallback(output_dir / "logs.jsonl")],
        peft_config=peft_config,
    )
    log.info(trainable_summary(trainer.model))
    return trainer


def run_rm(cfg: Any, plugins: PluginSet, options: Any = None) -> Any:
    """The ``rm`` recipe: train a reward model on ``cfg.dataset`` pairs (loss ``-log σ(r_chosen - r_rejected)``).

    Args:
        cfg: the core's training options.
        plugins: the loaded plugins.
        options: :class:`~swiftcore_recipe_preference.options.RMOptions` (defaults when None).

    Returns:
        :class:`~swiftcore_train.config.TrainResult`; each ``checkpoint-N`` loads with
        ``AutoModelForSequenceClassification`` (one score per sequence).
    """
    from dataclasses import asdict

    from swiftcore_train import start_run

    from swiftcore_recipe_preference.common import finish, prepare
    from swiftcore_recipe_preference.encoding import encode_rm_pairs
    from swiftcore_recipe_preference.options import RMOptions

    options = options if isinstance(options, RMOptions) else RMOptions(**(options or {}))
    prepared = prepare(cfg, plugins, "rm")
    train = encode_rm_pairs(prepared.train, prepared.template, prepared.tokenizer, cfg)
    val = encode_rm_pairs(prepared.val, prepared.template, prepared.tokenizer, cfg) if prepared.val else []
    output_dir = Path(cfg.output_dir)
    trainer = build_reward_trainer(cfg, options, train, val, prepared, output_dir)
    # Model, data and trainer are built: only now is the output directory touched.
    args_record = start_run(
        cfg,
        output_dir,
        prepared.spec,
        plugins,
        fresh=True,
        template=prepared.template_spec,
        preference={"recipe": "rm", "num_labels": 1, **asdict(options)},
    )
    trainer.checkpoint_extras = {"swiftcore_args.json": json.dumps(args_record, indent=2)}  # a text scorer
    return finish(trainer, cfg, output_dir, train_samples=len(train), evaluate=bool(val))
