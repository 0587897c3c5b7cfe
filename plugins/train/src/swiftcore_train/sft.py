"""The ``sft`` recipe: resolve the model and template, load and encode data, train, save.

Read top to bottom it is the recipe (torchtune style): every step is a call into a component with one job.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swiftcore.api import SwiftcoreError
from swiftcore_train.config import TrainConfig, TrainResult
from swiftcore_train.hooks import TrainSetup, check_training, setup_training
from swiftcore_train.run import (
    check_recipe_fits_model,
    encode_records,
    generation_defaults,
    is_main_process,
    load_template,
    load_train_val_records,
    log,
    resolve_resume,
    run_inputs,
    start_run,
    train_and_report,
)

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = ["run_sft"]


def _collator(cfg: TrainConfig, pad_token_id: int) -> Any:
    from swiftcore_data import PaddingCollator, PaddingFreeCollator

    if cfg.packing or cfg.padding_free:
        return PaddingFreeCollator()  # takes samples or packed bins alike
    return PaddingCollator(pad_token_id)


def _pack(samples: list[dict], cfg: TrainConfig) -> list[Any]:
    if not cfg.packing:
        return samples
    from swiftcore_data import pack_samples

    return pack_samples(samples, cfg.max_length, seed=cfg.seed)


def run_sft(cfg: TrainConfig, plugins: PluginSet, options: Any = None) -> TrainResult:
    """The ``sft`` recipe: fine-tune ``cfg.model`` on ``cfg.dataset``; see ``swiftcore train --help``.

    Everything that can be checked before training (model directory, model type, template vs tokenizer,
    every dataset row) is checked first, so a bad input fails in seconds with a message naming it.
    """
    from swiftcore.api.models import check_requirements, load_model, resolve_model_spec

    cfg.validate()
    from swiftcore_train.generation_eval import GenerationEvalOptions, load_eval_records

    evaluation = GenerationEvalOptions.from_options(options)
    loss_chunk_size = _loss_chunk_size(options)
    # The benchmark is read and checked (every line) before anything else loads.
    eval_records = load_eval_records(str(evaluation.eval_dataset), plugins) if evaluation.enabled else []
    output_dir = Path(cfg.output_dir)
    spec = resolve_model_spec(cfg.model, plugins, model_type=cfg.model_type)
    check_requirements(spec)
    check_recipe_fits_model(cfg, spec, plugins)
    check_training(plugins, cfg, options, kind="sft")  # capabilities (e.g. sequence parallelism) refuse early
    # A model plugin may train this run its own way (Qwen3-Omni's talker, --train-part talker): its result is ours.
    take_over = getattr(plugins.pm.hook, "swiftcore_train_run", None)  # None: a plugin set built without this plugin
    taken = take_over and take_over(
        cfg=cfg, options=dict(options or {}), model_dir=str(cfg.model), kind="sft", plugins=plugins
    )
    if taken is not None:
        return taken
    # Everything about the output directory and the checkpoint to resume is decided now, before the
    # (slow) data and model loading, and before anything on disk changes.
    from swiftcore_train.output_dir import plan_output_dir

    resume = resolve_resume(cfg, output_dir, spec)
    if is_main_process():
        plan_output_dir(
            output_dir, resume=resume is not None, overwrite=cfg.overwrite_output_dir, inputs=run_inputs(cfg)
        )
    # Every row is read and checked before the tokenizer loads (importing transformers takes seconds).
    train_records, val_records = load_train_val_records(cfg)
    template_spec, template, tokenizer = load_template(cfg, spec, plugins)
    log.info("model %s (%s), template %s (%s)", spec.name, spec.provider, template_spec.name, template_spec.provider)
    if template_spec.official and "tools" not in template_spec.supports:  # OLMoE, Qwen3-ASR: no tool format
        from swiftcore_data import refuse_tool_rows

        refuse_tool_rows([*train_records, *val_records], template_spec.name)  # else: an empty reply trained
    from swiftcore_media import has_media, prepare_media

    media = prepare_media(spec, cfg.model, tokenizer)  # None for text-only models
    train_samples = encode_records(list(train_records), template, tokenizer, cfg, desc="encoding train", media=media)
    val_samples = (
        encode_records(list(val_records), template, tokenizer, cfg, desc="encoding val", media=media)
        if val_records
        else []
    )
    with_media = sum(has_media(s) for s in train_samples + val_samples)
    multimodal = with_media > 0
    if multimodal and (cfg.packing or cfg.padding_free):
        flag = "--packing" if cfg.packing else "--padding-free"
        raise SwiftcoreError(
            f"{flag}: {with_media} of {len(train_samples) + len(val_samples)} samples carry media (images, audio or "
            "video), and packed rows with media are not supported yet (each packed sample would need its own media "
            f"tensors and position ids); train without {flag}: batches mixing text and media rows are then padded"
        )

    import torch
    from swiftcore_data import use_packed_attention

    from swiftcore_train.loss import sft_loss
    from swiftcore_train.trainer import JsonlLogCallback, SwiftTrainer, training_arguments
    from swiftcore_train.tuners import apply_tuner, trainable_summary

    torch.manual_seed(cfg.seed)
    model = load_model(spec, cfg.model, plugins, torch_dtype="float32" if cfg.dtype == "float32" else cfg.dtype)
    if (cfg.packing or cfg.padding_free) and use_packed_attention(model):
        # sdpa or eager would mask a packed row as one T x T block-diagonal; each sample's own span costs sum(length²).
        log.info("packed rows: softmax attention runs sample by sample (%s)", model.config._attn_implementation)
    model = apply_tuner(model, spec, cfg)
    log.info(trainable_summary(model))
    if cfg.gradient_checkpointing and cfg.tuner == "lora":
        model.enable_input_require_grads()  # checkpointed blocks need a grad-carrying input under LoRA

    targs = training_arguments(cfg, output_dir, evaluate=bool(val_samples), save_only_model=False)
    callbacks: list[Any] = [JsonlLogCallback(output_dir / "logs.jsonl")]
    if evaluation.enabled:
        from swiftcore_train.generation_eval import GenerationEvalCallback

        callbacks.append(
            GenerationEvalCallback.create(
                evaluation,
                eval_records,
                model_dir=cfg.model,
                output_dir=output_dir,
                plugins=plugins,
                template=cfg.template,
                model_type=cfg.model_type,
            )
        )
    collator = (
        media.collate
        if multimodal and media is not None
        else _collator(cfg, tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0)
    )
    # Capability plugins (sequence parallelism, a module freezer, ...) change the run here, not by name.
    setup = setup_training(
        plugins,
        TrainSetup(
            kind="sft",
            model=model,
            collator=collator,
            trainer_class=SwiftTrainer,
            training_args=targs,
            tokenizer=tokenizer,
            cfg=cfg,
            options=dict(options or {}),
            callbacks=callbacks,
            multimodal=multimodal,
        ),
    )
    trainer = setup.trainer_class(
        model=setup.model,
        args=setup.training_args,
        train_dataset=_pack(train_samples, cfg),
        eval_dataset=_pack(val_samples, cfg) if val_samples else None,
        data_collator=setup.collator,
        processing_class=setup.tokenizer,
        callbacks=setup.callbacks,
    )
    if setup.token_weighted_loss:  # off when a capability's trainer weights the step itself (sequence parallelism)
        # The chunked loss (--loss-chunk-size, never the full-vocabulary logits) or, where it cannot apply, the plain
        # token-weighted one.
        trainer.compute_loss_func = sft_loss(trainer, loss_chunk_size, multimodal=multimodal)
    # Model, data and trainer are built: only now is the output directory touched.
    args_record = start_run(
        cfg,
        output_dir,
        spec,
        plugins,
        fresh=resume is None,
        resumed_step=_global_step(resume),
        template=template_spec,  # recorded by the manifest as {name, provider, plugin, version}
        generation_defaults=generation_defaults(list(train_records), template, cfg),
    )
    from swiftcore_media import processor_files

    # A multimodal checkpoint needs its processor files to be served with media.
    trainer.checkpoint_extras = {"swiftcore_args.json": json.dumps(args_record, indent=2), **processor_files(cfg.model)}
    return train_and_report(
        trainer, cfg, output_dir, train_samples=len(train_samples), evaluate=bool(val_samples), resume=resume
    )


def _loss_chunk_size(options: Any) -> int:
    """``--loss-chunk-size`` from the recipe's options (the default when a caller passes none), checked."""
    from swiftcore_train.loss import DEFAULT_LOSS_CHUNK_SIZE

    value = dict(options or {}).get("loss_chunk_size")
    if value is None:
        return DEFAULT_LOSS_CHUNK_SIZE
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SwiftcoreError(f"--loss-chunk-size: {value!r} must be 0 (the plain loss) or a positive number of tokens")
    return value


def _global_step(checkpoint: Path | None) -> int | None:
    """The step a checkpoint was saved at (its ``trainer_state.json``), None for no checkpoint."""
    if checkpoint is None:
        return None
    return int(json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8")).get("global_step", 0))
