"""``run_kto``: the ``kto`` recipe, TRL's KTOTrainer on unpaired examples encoded by swiftcore's templates.

KTO (Ethayarajh et al.) learns from replies labelled desirable or undesirable, paired or not:

    desirable:    1 − σ(β·(log π/π_ref − z_ref))      undesirable: 1 − σ(β·(z_ref − log π/π_ref))

weighted by ``--desirable-weight`` / ``--undesirable-weight`` and averaged; ``z_ref`` is the batch's mean
log-ratio on mismatched (prompt, reply) pairs (TRL 1.16 does not clamp it at 0 as the paper does). The
reference model is handled as for DPO (:mod:`swiftcore_recipe_preference.dpo`).

The KL estimate pairs each row with another row of its batch, so the ``kto`` loss needs a batch of 2 or more. When
``--batch-size`` is not given, the recipe trains :data:`DEFAULT_BATCH_SIZE` rows a batch instead of ``swiftcore
train``'s default of 1 (:func:`kto_batch_size`); a batch of 1 that was asked for is refused.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swiftcore.api import SwiftcoreError
from swiftcore_recipe_preference.options import KTO_DEFAULT_BATCH_SIZE

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "batch_size_given",
    "build_kto_trainer",
    "kto_batch_size",
    "kto_trainer_class",
    "run_kto",
]

log = logging.getLogger("swiftcore.preference")

#: The ``kto`` recipe's batch when ``--batch-size`` is not given: the KTO paper's and TRL's examples use batches of
#: 8 or more, and a batch of 1 leaves the KL estimate no other row to pair with.
DEFAULT_BATCH_SIZE = KTO_DEFAULT_BATCH_SIZE


def batch_size_given() -> bool:
    """Whether this run's ``--batch-size`` was given (on the command line, in a ``--config`` file or through the
    environment) rather than left at ``swiftcore train``'s default.

    ``TrainConfig`` holds a value, not where it came from, so the answer is the ``swiftcore train`` command's own
    record (click's parameter source). Outside that command, from Python, a ``TrainConfig``'s batch size is the
    caller's choice: True.
    """
    import click

    ctx = click.get_current_context(silent=True)
    if ctx is None or "batch_size" not in ctx.params:
        return True
    return ctx.get_parameter_source("batch_size") not in (None, click.core.ParameterSource.DEFAULT)


def kto_batch_size(cfg: Any) -> Any:
    """``cfg``, or a copy of it with :data:`DEFAULT_BATCH_SIZE` rows a batch when ``--batch-size`` was not given."""
    if batch_size_given() or cfg.batch_size == DEFAULT_BATCH_SIZE:
        return cfg
    log.info(
        "--recipe kto: --batch-size not given: %d rows a batch, not %d (the KL estimate pairs each row with "
        "another row of its batch); give --batch-size to choose",
        DEFAULT_BATCH_SIZE,
        cfg.batch_size,
    )
    return dataclasses.replace(cfg, batch_size=DEFAULT_BATCH_SIZE)


def kto_trainer_class() -> Any:
    """TRL's KTOTrainer taking swiftcore-encoded ``{"prompt_ids", "completion_ids", "label"}`` rows."""
    from trl import KTOTrainer

    from swiftcore_recipe_preference.common import require_encoded, swift_trl_trainer

    class PreferenceKTOTrainer(swift_trl_trainer(KTOTrainer)):  # type: ignore[misc]
        """KTOTrainer on rows made by the family's template (TRL's own re-tokenisation skipped)."""

        def _prepare_dataset(self, dataset: Any, processing_class: Any, args: Any, dataset_name: str) -> Any:
            # As for DPO: TRL 1.16 re-tokenises "prompt"/"completion" with the tokenizer's chat template and has
            # no pre-tokenised path, so the encoded rows pass as they are. Its one other step is kept: each
            # example's KL completion is its batch neighbour's (a rotation within each batch; sequential order).
            require_encoded(dataset, {"prompt_ids", "completion_ids", "label"}, dataset_name)
            if not self.calculate_KL:
                return dataset

            def rotate(batch: dict) -> dict:
                """(x_1, y_1), ..., (x_n, y_n) -> KL completions y_n, y_1, ..., y_{n-1}, as TRL builds them."""
                batch["KL_completion_ids"] = [batch["completion_ids"][-1]] + batch["completion_ids"][:-1]
                return batch

            return dataset.map(rotate, batched=True, batch_size=args.per_device_train_batch_size)

    return PreferenceKTOTrainer


def build_kto_trainer(
    cfg: Any, options: Any, plugins: PluginSet, train: list[dict], val: list[dict], prepared: Any, output_dir: Path
) -> Any:
    """The configured :func:`kto_trainer_class` instance for encoded ``train`` / ``val`` samples."""
    import torch
    from datasets import Dataset
    from swiftcore_train import JsonlLogCallback, trainable_summary
    from trl import KTOConfig

    from swiftcore_recipe_preference.common import chunk_trainer_heads, router_aux_loss_coef, trl_arguments
    from swiftcore_recipe_preference.dpo import load_policy_and_reference

    if options.loss_type == "kto" and cfg.batch_size < 2:
        raise SwiftcoreError(
            f"--recipe kto: --batch-size {cfg.batch_size}: the kto loss needs at least 2 rows a batch (its KL "
            f"estimate pairs each row with another row of the batch); leave --batch-size out for the recipe's "
            f"default of {DEFAULT_BATCH_SIZE}, or give 2 or more"
        )
    torch.manual_seed(cfg.seed)
    policy, reference = load_policy_and_reference(cfg, options, prepared.spec, plugins, prepared.tokenizer)
    log.info(trainable_summary(policy))
    args = trl_arguments(
        KTOConfig,
        cfg,
        output_dir,
        evaluate=bool(val),
        beta=options.beta,
        loss_type=options.loss_type,
        desirable_weight=options.desirable_weight,
        undesirable_weight=options.undesirable_weight,
        precompute_ref_log_probs=options.precompute_ref_logps,
        max_length=None,  # applied when encoding
        disable_dropout=True,
        router_aux_loss_coef=router_aux_loss_coef(policy),
        model_init_kwargs=None,
        train_sampling_strategy="sequential",  # the KL completions are built against fixed batch neighbours
    )
    trainer = kto_trainer_class()(
        model=policy,
        ref_model=reference,
        args=args,
        train_dataset=Dataset.from_list(train),
        eval_dataset=Dataset.from_list(val) if val else None,
        processing_class=prepared.tokenizer,
        callbacks=[JsonlLogCallback(output_dir / "logs.jsonl")],
    )
    if cfg.tuner == "lora" and "ref" in getattr(trainer.model, "peft_config", {}):
        trainer.model.delete_adapter("ref")  # the fresh adapter's base is the reference (see dpo.py)
        trainer.model.set_adapter("default")
    # kto_trainer.py adds the policy's head with these fields (mean_logits feeds the logits/* metrics)
    chunk_trainer_heads(trainer, options.loss_chunk_size, ("log_probs", "entropy", "mean_logits"))
    if cfg.padding_free:
        from swiftcore_recipe_preference.padding_free import pack_trainer_models

        pack_trainer_models(trainer)
    return trainer


def run_kto(cfg: Any, plugins: PluginSet, options: Any = None) -> Any:
    """The ``kto`` recipe: KTO-train ``cfg.model`` on labelled (or paired) replies; saves what SFT saves.

    Raises:
        DataError: a bad row, or labels all of one kind.
    """
    from dataclasses import asdict

    from swiftcore_train import generation_defaults, start_run

    from swiftcore_recipe_preference.common import checkpoint_extras, finish, prepare, refuse_untemplated_tools
    from swiftcore_recipe_preference.data import load_unpaired, split_pairs
    from swiftcore_recipe_preference.encoding import encode_kto_examples
    from swiftcore_recipe_preference.options import KTOOptions

    options = options if isinstance(options, KTOOptions) else KTOOptions(**(options or {}))
    cfg = kto_batch_size(cfg)  # before anything reads it, so args.json records the batch trained
    prepared = prepare(cfg, plugins, "kto", load=False)
    examples = load_unpaired(cfg.dataset, skip_bad_rows=cfg.skip_bad_rows)
    if cfg.val_dataset:
        train_examples, val_examples = examples, load_unpaired(cfg.val_dataset, skip_bad_rows=cfg.skip_bad_rows)
    else:
        train_examples, val_examples = split_pairs(examples, cfg.split_ratio, cfg.seed)
    refuse_untemplated_tools(prepared.template_spec, [e.record() for e in [*train_examples, *val_examples]])
    # The trainer reads the rows in order (sequential sampling, for the KL pairing): shuffle them once here.
    random.Random(cfg.seed).shuffle(train_examples)
    train = encode_kto_examples(train_examples, prepared.template, prepared.tokenizer, cfg)
    val = encode_kto_examples(val_examples, prepared.template, prepared.tokenizer, cfg) if val_examples else []
    output_dir = Path(cfg.output_dir)
    trainer = build_kto_trainer(cfg, options, plugins, train, val, prepared, output_dir)
    args_record = start_run(
        cfg,
        output_dir,
        prepared.spec,
        plugins,
        fresh=True,
        template=prepared.template_spec,
        generation_defaults=generation_defaults(
            [e.record() for e in train_examples if e.label], prepared.template, cfg
        ),
        preference={"recipe": "kto", **asdict(options)},
    )
    trainer.checkpoint_extras = checkpoint_extras(cfg, args_record)
    return finish(trainer, cfg, output_dir, train_samples=len(train), evaluate=bool(val))
