"""``run_dpo``: the ``dpo`` recipe, TRL's DPOTrainer on pairs encoded by swiftcore's templates.

Read top to bottom it is the recipe: check options and every row, encode the pairs with the family's
template, load the policy (LoRA or full) and the reference, train, save ordinary HF / peft checkpoints.

The reference model: with LoRA it is the policy with its adapter disabled (no second copy in memory); with
full fine-tuning a frozen copy of ``--model`` (or ``--ref-model``), or none at all during training with
``--precompute-ref-logps`` (its log-probs are computed once, before the first step).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swiftcore.api import SwiftcoreError

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = ["build_dpo_trainer", "dpo_trainer_class", "load_policy_and_reference", "pair_media", "run_dpo"]

log = logging.getLogger("swiftcore.preference")


def dpo_trainer_class() -> Any:
    """TRL's DPOTrainer taking swiftcore-encoded samples as they are, with swiftcore's checkpointing."""
    from trl import DPOTrainer

    from swiftcore_recipe_preference.common import require_encoded, swift_trl_trainer

    class PreferenceDPOTrainer(swift_trl_trainer(DPOTrainer)):  # type: ignore[misc]
        """DPOTrainer on ``{"prompt_ids", "chosen_ids", "rejected_ids"}`` rows made by the family's template."""

        def _prepare_dataset(self, dataset: Any, processing_class: Any, args: Any, dataset_name: str) -> Any:
            # TRL 1.16's DPOTrainer always re-tokenises "prompt"/"chosen"/"rejected" with the tokenizer's chat
            # template; it has no pre-tokenised path. swiftcore's template already produced the exact ids
            # (train/serve rule, thinking blocks), and length limits were applied then, so the rows pass as-is.
            require_encoded(dataset, {"prompt_ids", "chosen_ids", "rejected_ids"}, dataset_name)
            return dataset

        def _set_signature_columns_if_needed(self) -> None:
            super()._set_signature_columns_if_needed()
            # Pairs with images carry an index into their media items (encoding.PairMedia), read by the collator.
            self._signature_columns = [*self._signature_columns, "media_index", "prompt_mm_types"]

    return PreferenceDPOTrainer


def check_ref_tokenizer(ref_dir: str, tokenizer: Any) -> None:
    """Refuse a reference model whose tokenizer differs from the policy's: their log-probs would score other
    token sequences, and the DPO log-ratio would be meaningless."""
    from swiftcore.api.models import load_tokenizer

    ref_vocab = load_tokenizer(ref_dir).get_vocab()
    if ref_vocab != tokenizer.get_vocab():
        differ = sorted(set(ref_vocab.items()) ^ set(tokenizer.get_vocab().items()))[:3]
        raise SwiftcoreError(
            f"--ref-model {ref_dir!r} has another tokenizer than --model ({len(ref_vocab)} vs "
            f"{len(tokenizer.get_vocab())} tokens, e.g. {differ}); DPO needs both to tokenize the pairs alike"
        )


def load_policy_and_reference(cfg: Any, options: Any, spec: Any, plugins: PluginSet, tokenizer: Any) -> tuple[Any, Any]:
    """``(policy, reference)`` for DPO and KTO: the reference is None where TRL needs no separate model (LoRA, or
    ``--precompute-ref-logps`` without ``--ref-model``)."""
    from swiftcore_train import apply_tuner

    from swiftcore.api.models import load_model, resolve_model_spec

    dtype = "float32" if cfg.dtype == "float32" else cfg.dtype
    policy = apply_tuner(load_model(spec, cfg.model, plugins, torch_dtype=dtype), spec, cfg)
    ref_model = getattr(options, "ref_model", None)
    if cfg.tuner == "lora":
        if ref_model:
            raise SwiftcoreError(
                "--ref-model: with --tuner lora the reference is --model with the adapter disabled; drop "
                "--ref-model, or train with --tuner full"
            )
        return policy, None
    if options.precompute_ref_logps and not ref_model:
        return policy, None  # TRL scores the reference with the untrained policy before the first step
    ref_dir = ref_model or cfg.model
    if ref_model:
        check_ref_tokenizer(ref_dir, tokenizer)
    ref_spec = resolve_model_spec(ref_dir, plugins) if ref_model else spec
    reference = load_model(ref_spec, ref_dir, plugins, torch_dtype=dtype).eval()
    reference.requires_grad_(False)
    return policy, reference


def build_dpo_trainer(
    cfg: Any,
    options: Any,
    plugins: PluginSet,
    train: list[dict],
    val: list[dict],
    prepared: Any,
    output_dir: Path,
    media: Any = None,
) -> Any:
    """The configured :func:`dpo_trainer_class` instance for encoded ``train`` / ``val`` samples (``media``: the
    :class:`~swiftcore_recipe_preference.encoding.PairMedia` the samples were encoded with, on a multimodal model).
    """
    import torch
    from datasets import Dataset
    from swiftcore_train import JsonlLogCallback, trainable_summary
    from trl import DPOConfig

    from swiftcore_recipe_preference.common import chunk_trainer_heads, router_aux_loss_coef, trl_arguments

    torch.manual_seed(cfg.seed)
    policy, reference = load_policy_and_reference(cfg, options, prepared.spec, plugins, prepared.tokenizer)
    log.info(trainable_summary(policy))
    args = trl_arguments(
        DPOConfig,
        cfg,
        output_dir,
        evaluate=bool(val),
        beta=options.beta,
        loss_type=list(options.loss_type),
        loss_weights=list(options.loss_weights) or None,
        label_smoothing=options.label_smoothing,
        precompute_ref_log_probs=options.precompute_ref_logps,
        max_length=None,  # applied when encoding (--max-length / --truncation)
        truncation_mode="keep_end" if cfg.truncation == "truncate_left" else "keep_start",
        disable_dropout=True,
        router_aux_loss_coef=router_aux_loss_coef(policy),
        # The policy and reference are loaded by swiftcore (family-specific classes), never by TRL.
        model_init_kwargs=None,
    )
    if cfg.truncation in ("truncate_right", "truncate_left"):
        args.max_length = cfg.max_length  # the collator cuts each sequence as --truncation says
    collator = None
    if media is not None:
        from trl.trainer.dpo_trainer import DataCollatorForPreference

        tokenizer = prepared.tokenizer
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        collator = media.collator(DataCollatorForPreference(pad_token_id=pad_id, max_length=args.max_length))
    trainer = dpo_trainer_class()(
        model=policy,
        ref_model=reference,
        args=args,
        data_collator=collator,
        train_dataset=Dataset.from_list(train),
        eval_dataset=Dataset.from_list(val) if val else None,
        processing_class=prepared.tokenizer,
        callbacks=[JsonlLogCallback(output_dir / "logs.jsonl")],
    )
    peft_model = trainer.model
    if cfg.tuner == "lora" and "ref" in getattr(peft_model, "peft_config", {}):
        # TRL copies a PeftModel's adapter to a frozen "ref" adapter, for adapters that start trained. swiftcore's
        # adapter is fresh (B = 0), so the adapter-disabled base *is* the reference: drop the copy, and TRL
        # disables the adapter for reference passes instead (nothing extra in memory or in the checkpoint).
        peft_model.delete_adapter("ref")
        peft_model.set_adapter("default")
    # The metrics' fields TRL added the policy's head with (dpo_trainer.py: logits/*, accuracy, WPO weights).
    weighting = ("log_sum_sq_probs",) if trainer.use_weighting else ()
    fields = ("log_probs", "entropy", "mean_logits", "is_top1", *weighting)
    chunk_trainer_heads(trainer, options.loss_chunk_size, fields)
    if cfg.padding_free:
        from swiftcore_recipe_preference.padding_free import pack_trainer_models

        pack_trainer_models(trainer)
    return trainer


def run_dpo(cfg: Any, plugins: PluginSet, options: Any = None, *, recipe: str = "dpo") -> Any:
    """The ``dpo`` recipe (:class:`swiftcore.api.RecipeSpec`): DPO-train ``cfg.model`` on ``cfg.dataset`` pairs.

    Args:
        cfg: the core's training options (:class:`~swiftcore_train.config.TrainConfig`).
        plugins: the loaded plugins.
        options: :class:`~swiftcore_recipe_preference.options.DPOOptions` (default options when None).
        recipe: the recipe name the run records (``mpo`` runs on this trainer too).

    Returns:
        :class:`~swiftcore_train.config.TrainResult`; each ``checkpoint-N`` is a peft adapter (LoRA) or a full HF
        model, as SFT saves them, so ``swiftcore infer`` / ``deploy`` / ``export`` take it unchanged.
    """
    from swiftcore_train import generation_defaults, start_run

    from swiftcore_recipe_preference.common import checkpoint_extras, finish, prepare
    from swiftcore_recipe_preference.encoding import encode_dpo_pairs
    from swiftcore_recipe_preference.options import DPOOptions

    options = options if isinstance(options, DPOOptions) else DPOOptions(**(options or {}))
    prepared = prepare(cfg, plugins, "dpo")
    media = pair_media(cfg, prepared)
    train = encode_dpo_pairs(prepared.train, prepared.template, prepared.tokenizer, cfg, media)
    val = encode_dpo_pairs(prepared.val, prepared.template, prepared.tokenizer, cfg, media) if prepared.val else []
    output_dir = Path(cfg.output_dir)
    trainer = build_dpo_trainer(cfg, options, plugins, train, val, prepared, output_dir, media)
    # Model, data and trainer are built: only now is the output directory touched.
    args_record = start_run(
        cfg,
        output_dir,
        prepared.spec,
        plugins,
        fresh=True,
        template=prepared.template_spec,
        generation_defaults=generation_defaults([p.record(p.chosen) for p in prepared.train], prepared.template, cfg),
        preference={"recipe": recipe, "trl": _trl_version(), **_options_record(options)},
    )
    trainer.checkpoint_extras = checkpoint_extras(cfg, args_record)
    return finish(trainer, cfg, output_dir, train_samples=len(train), evaluate=bool(val))


def pair_media(cfg: Any, prepared: Any) -> Any:
    """The :class:`~swiftcore_recipe_preference.encoding.PairMedia` for a run whose pairs carry images, audio or
    video (None when none does; a text-only model then refuses them when encoding, naming the row).

    Raises:
        SwiftcoreError: media pairs with ``--padding-free`` or a ``--truncation`` that cuts sequences (either
            would split a media placeholder from its tensors).
    """
    from swiftcore_media import prepare_media

    from swiftcore_recipe_preference.encoding import PairMedia

    if not any(p.prompt.get(k) for p in [*prepared.train, *prepared.val] for k in ("images", "audios", "videos")):
        return None
    preparer = prepare_media(prepared.spec, cfg.model, prepared.tokenizer)
    if preparer is None:
        return None
    clash = [f for f, on in (("--padding-free", cfg.padding_free), ("--truncation " + cfg.truncation,
             cfg.truncation in ("truncate_right", "truncate_left"))) if on]  # fmt: skip
    if clash:
        raise SwiftcoreError(
            f"--recipe dpo with image / audio pairs: {', '.join(clash)} not supported; leave it off (use --truncation "
            "drop or error)"
        )
    return PairMedia(preparer)


def _options_record(options: Any) -> dict[str, Any]:
    from dataclasses import asdict

    return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(options).items()}


def _trl_version() -> str:
    from importlib import metadata

    return metadata.version("trl")
