"""``run_head_training``: the training recipe of every head task, on core components.

Read top to bottom it is the recipe: check options and data, load the backbone's decoder, add the
head, tune (LoRA or full), train with :class:`swiftcore_train.trainer.SwiftTrainer`, save each
checkpoint in its ecosystem format (:mod:`swiftcore_heads.save`).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swiftcore.api import SwiftcoreError

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = ["run_head_training", "yes_no_token_ids"]

log = logging.getLogger("swiftcore.heads")


def yes_no_token_ids(tokenizer: Any, positive: str, negative: str) -> tuple[int, int]:
    """Token ids scored by the generative reranker: each word's token, or its first piece if it splits.

    Raises:
        SwiftcoreError: both words start with the same token (their logits could not differ).
    """
    ids = []
    for word in (positive, negative):
        token_id = tokenizer.convert_tokens_to_ids(word)
        if token_id is None or token_id == tokenizer.unk_token_id:
            pieces = tokenizer(word, add_special_tokens=False)["input_ids"]
            if len(pieces) > 1:
                log.warning("generative reranker: %r is %d tokens; scoring its first, %r", word, len(pieces), pieces[0])
            token_id = pieces[0]
        ids.append(int(token_id))
    if ids[0] == ids[1]:
        raise SwiftcoreError(
            f"--positive-token {positive!r} and --negative-token {negative!r} start with the same token {ids[0]}; "
            "pick words the tokenizer tells apart"
        )
    return ids[0], ids[1]


def _hidden_size(model_dir: str) -> int:
    from swiftcore.api.models import read_hf_config

    config = read_hf_config(model_dir)
    text = config.get("text_config") or config
    return int(text.get("hidden_size") or config.get("hidden_size"))


def _head_info(cfg: Any, tokenizer: Any, yes_no: tuple[int, int] | None) -> dict[str, Any]:
    info: dict[str, Any] = {"pooling": cfg.pooling, "max_length": cfg.max_length, "loss": cfg.loss}
    if cfg.task == "embedding":
        info.update(normalize=cfg.normalize, mrl_dims=list(cfg.mrl_dims))
    if cfg.task == "classification":
        info.update(num_labels=cfg.num_labels, problem_type=cfg.problem_type)
    if cfg.task == "reranker":
        info.update(num_labels=1, problem_type="regression")
    if cfg.task == "generative_reranker":
        info.update(
            yes_no_ids=list(yes_no),
            positive_token=cfg.positive_token,
            negative_token=cfg.negative_token,
            instruction=cfg.reranker_instruction,
        )
    return info


def build_head_model(cfg: Any, spec: Any, plugins: PluginSet, tokenizer: Any, yes_no: tuple[int, int] | None) -> Any:
    """Load the backbone, keep its decoder (and lm_head for the generative reranker), add the head, tune it."""
    from swiftcore.api.models import load_model
    from swiftcore_heads.model import HeadModel, extract_decoder, output_head
    from swiftcore_heads.tuning import apply_head_tuner

    full = load_model(spec, cfg.model, plugins, torch_dtype="float32" if cfg.dtype == "float32" else cfg.dtype)
    decoder, peft_model = apply_head_tuner(extract_decoder(full, spec), spec, cfg)
    lm_head, softcap = None, None
    if cfg.task == "generative_reranker":
        head, tied = output_head(full)
        lm_head = None if tied else head
        if lm_head is not None and cfg.tuner == "lora":
            lm_head.requires_grad_(False)  # LoRA trains adapters only, as in SFT
        softcap = getattr(full.config.get_text_config(), "final_logit_softcapping", None)
    model = HeadModel(
        decoder,
        cfg.task,
        pooling=cfg.pooling,
        num_labels=cfg.num_labels if cfg.task == "classification" else 1,
        lm_head=lm_head,
        yes_no_ids=yes_no,
        logit_softcap=softcap,
    )
    # Not a registered submodule: the peft wrapper holds the same decoder, kept only to merge when saving.
    object.__setattr__(model, "_peft", peft_model)
    if cfg.gradient_checkpointing:
        decoder.gradient_checkpointing_enable()
        if peft_model is not None:
            decoder.enable_input_require_grads()
    return model


def _trainer_class() -> Any:
    from swiftcore_train import SwiftTrainer

    from swiftcore_heads.objectives import batch_loss
    from swiftcore_heads.save import save_head_model

    class HeadTrainer(SwiftTrainer):
        """SwiftTrainer computing the head's loss and saving checkpoints in the head's ecosystem format."""

        head_cfg: Any = None
        head_info: dict[str, Any] = {}

        def compute_loss(self, model: Any, inputs: dict, return_outputs: bool = False, num_items_in_batch: Any = None):
            extras = {k: inputs.pop(k) for k in ("labels", "n_groups", "group_size") if k in inputs}
            outputs = model(**inputs)
            loss = batch_loss(outputs, extras, self.head_cfg)
            return (loss, outputs) if return_outputs else loss

        def _save(self, output_dir: str | None = None, state_dict: Any = None) -> None:
            if not self.args.should_save:
                return
            save_head_model(self.model, self.processing_class, output_dir or self.args.output_dir, self.head_info)

        def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
            raise SwiftcoreError("--resume-from-checkpoint is not supported for head tasks yet; start a fresh run")

    return HeadTrainer


def run_recipe(cfg: Any, plugins: PluginSet, options: Any = None) -> Any:
    """The recipe contract (:class:`swiftcore.api.RecipeSpec`): train the head the recipe is named after.

    Args:
        cfg: the core's training options, or a :class:`~swiftcore_heads.options.HeadTrainConfig` from Python.
        plugins: the loaded plugins.
        options: the head options from the command line (:class:`~swiftcore_heads.options.HeadOptions`).
    """
    from swiftcore_heads.options import head_train_config

    head_spec = plugins.registry.get("head", cfg.recipe)
    cfg = head_train_config(cfg, options)
    cfg.task = head_spec.task
    return run_head_training(cfg, plugins, head_spec)


def run_head_training(cfg: Any, plugins: PluginSet, head_spec: Any) -> Any:
    """Train ``cfg.model`` as ``cfg.task`` (classification, embedding, reranker, generative_reranker).

    Everything checkable (options, model type, every dataset row, Matryoshka dims) is checked before
    the model is loaded.

    Args:
        cfg: the :class:`~swiftcore_train.config.TrainConfig` (``cfg.task`` names the head).
        plugins: the loaded plugins.
        head_spec: the :class:`~swiftcore.specs.HeadSpec` of ``cfg.task``.

    Returns:
        :class:`swiftcore_train.config.TrainResult`; each ``checkpoint-N`` is loadable by
        :func:`swiftcore_heads.save.load_head_model` and by its ecosystem (sentence-transformers, transformers).
    """
    from swiftcore_train import TrainSetup, check_training, setup_training, start_run, train_and_report

    from swiftcore.api.models import check_requirements, load_tokenizer, resolve_model_spec
    from swiftcore_heads.data import GroupCollator, encode_examples, load_examples
    from swiftcore_heads.objectives import check_mrl_dims, resolve_head_options

    cfg.validate()
    resolve_head_options(cfg, head_spec)
    if cfg.resume_from_checkpoint:
        raise SwiftcoreError("--resume-from-checkpoint is not supported for head tasks yet; start a fresh run")
    spec = resolve_model_spec(cfg.model, plugins, model_type=cfg.model_type)
    check_requirements(spec)
    check_mrl_dims(cfg, _hidden_size(cfg.model), cfg.model)
    check_training(plugins, cfg, cfg.recipe_options, kind=cfg.task)  # capabilities (sequence parallelism) refuse early
    tokenizer = load_tokenizer(cfg.model)
    train = encode_examples(load_examples(cfg.dataset, cfg.task, cfg), cfg.task, tokenizer, cfg)
    val = (
        encode_examples(load_examples(cfg.val_dataset, cfg.task, cfg), cfg.task, tokenizer, cfg)
        if cfg.val_dataset
        else []
    )
    yes_no = (
        yes_no_token_ids(tokenizer, cfg.positive_token, cfg.negative_token)
        if cfg.task == "generative_reranker"
        else None
    )
    log.info(
        "task %s (%s): model %s (%s), %d rows, loss %s",
        cfg.task,
        head_spec.provider,
        spec.name,
        spec.provider,
        len(train),
        cfg.loss,
    )

    import torch
    from swiftcore_train import JsonlLogCallback, trainable_summary, training_arguments

    torch.manual_seed(cfg.seed)
    model = build_head_model(cfg, spec, plugins, tokenizer, yes_no)
    log.info(trainable_summary(model))
    output_dir = Path(cfg.output_dir)
    args_record = start_run(
        cfg, output_dir, spec, plugins, fresh=True, head={"name": head_spec.name, "provider": str(head_spec.provider)}
    )
    targs = training_arguments(
        cfg,
        output_dir,
        evaluate=bool(val),
        gradient_checkpointing=False,
        include_num_input_tokens_seen="no",
        label_names=["labels"],
        save_only_model=True,
    )
    collator: Any = GroupCollator(
        cfg.task,
        tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0,
        padding_free=cfg.padding_free or cfg.packing,
    )
    # Capability plugins (sequence parallelism splits model.decoder) change the run here, not by name.
    setup = setup_training(
        plugins,
        TrainSetup(
            kind=cfg.task,
            model=model,
            collator=collator,
            trainer_class=_trainer_class(),
            training_args=targs,
            tokenizer=tokenizer,
            cfg=cfg,
            options=dict(cfg.recipe_options),
            callbacks=[JsonlLogCallback(output_dir / "logs.jsonl")],
            token_weighted_loss=False,  # the head trainer computes the head's own loss
        ),
    )
    trainer = setup.trainer_class(
        model=setup.model,
        args=setup.training_args,
        train_dataset=train,
        eval_dataset=val or None,
        data_collator=setup.collator,
        processing_class=setup.tokenizer,
        callbacks=setup.callbacks,
    )
    trainer.head_cfg = cfg
    trainer.head_info = {"head": head_spec.name, **_head_info(cfg, tokenizer, yes_no)}
    trainer.checkpoint_extras = {"swiftcore_args.json": json.dumps(args_record, indent=2)}
    return train_and_report(trainer, cfg, output_dir, train_samples=len(train), evaluate=bool(val))
