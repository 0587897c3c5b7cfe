"""``run_kto``: the ``kto`` recipe, TRL's KTOTrainer on unpaired examples encoded by swiftcore's templates.

KTO (Ethayarajh et al.) learns from replies labelled desirable or undesirable, paired or not:

    desirable:    1 − σ(β·(log π/π_ref − z_ref))      undesirable: 1 − σ(β·(z_ref − log π/π_ref))

weighted by ``--desirable-weight`` / ``--undesirable-weight`` and averaged; ``z_ref`` is the batch's mean
log-ratio on mismatched (prompt, reply) pairs (TRL 1.16 does not clamp it at 0 as the paper does). The
reference model is handled as for DPO (:mod:`swiftcore_recipe_preference.dpo`).
"""

from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swiftcore.api import SwiftcoreError

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = ["build_kto_trainer", "kto_trainer_class", "run_kto"]

log = logging.getLogger("swiftcore.preference")


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

    from swiftcore_recipe_preference.common import router_aux_loss_coef, trl_arguments
    from swiftcore_recipe_preference.dpo import load_policy_and_reference

    if options.loss_type == "kto" and cfg.batch_size < 2:
        raise SwiftcoreError(
            "--recipe kto: --batch-size must be at least 2 (the KL estimate uses the batch's other rows)"
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

    from swiftcore_recipe_preference.common import checkpoint_extras, finish, prepare
    from swiftcore_recipe_preference.data import load_unpaired, split_pairs
    from swiftcore_recipe_preference.encoding import encode_kto_examples
    from swiftcore_recipe_preference.options import KTOOptions

    options = options if isinstance(options, KTOOptions) else KTOOptions(**(options or {}))
    prepared = prepare(cfg, plugins, "kto", load=False)
    examples = load_unpaired(cfg.dataset, skip_bad_rows=cfg.skip_bad_rows)
    if cfg.val_dataset:
        train_examples, val_examples = examples, load_unpaired(cfg.val_dataset, skip_bad_rows=cfg.skip_bad_rows)
    else:
        train_examples, val_examples = split_pairs(examples, cfg.split_ratio, cfg.seed)
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
