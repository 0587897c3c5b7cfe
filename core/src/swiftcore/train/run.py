"""``run_training``: resolve the model and template, load and encode data, train, save; the whole SFT recipe.

Read top to bottom it is the recipe (torchtune style): every step is a call into a component with one job.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swiftcore.errors import SwiftcoreError
from swiftcore.train.config import TrainConfig

__all__ = [
    "run_training",
    "run_sft",
    "start_run",
    "train_and_report",
    "TrainResult",
    "encode_records",
    "check_template_fits_tokenizer",
    "generation_defaults",
    "resolve_resume",
    "run_inputs",
]

log = logging.getLogger("swiftcore.train")


@dataclass
class TrainResult:
    """Where a run left its outputs."""

    output_dir: Path
    last_checkpoint: Path | None
    log_file: Path
    plot_file: Path | None
    train_samples: int
    global_step: int
    final_loss: float | None


def check_template_fits_tokenizer(template_spec: Any, tokenizer: Any, model_dir: str) -> None:
    """Refuse a template whose special tokens the tokenizer lacks (they would be split into pieces)."""
    vocab = tokenizer.get_vocab()
    missing = [t for t in template_spec.special_tokens if t not in vocab]
    if missing:
        raise SwiftcoreError(
            f"template {template_spec.name!r} ({template_spec.provider}) emits special token(s) "
            f"{', '.join(map(repr, missing))} that the tokenizer in {model_dir!r} does not have. Pick the "
            "template that matches this model with --template (see `swiftcore template list`)."
        )


def with_thinking_default(record: dict, cfg: TrainConfig) -> dict:
    """``record`` with ``--enable-thinking/--disable-thinking`` as its default thinking mode (its own wins)."""
    if cfg.enable_thinking is None:
        return record
    kwargs = dict(record.get("chat_template_kwargs") or {})
    kwargs.setdefault("enable_thinking", cfg.enable_thinking)
    return {**record, "chat_template_kwargs": kwargs}


#: Records per ``Template.encode_batch`` call: big enough for its render/tokenize overlap to pay off.
ENCODE_CHUNK = 512


def encode_records(
    records: list[dict], template: Any, tokenizer: Any, cfg: TrainConfig, *, desc: str = "encoding", media: Any = None
) -> list[dict]:
    """Encode canonical records into ``{"input_ids", "labels"}`` samples (those with no loss token dropped).

    Records go through ``Template.encode_batch`` in chunks of :data:`ENCODE_CHUNK`; a chunk that fails
    is encoded again record by record, so the error names the failing record's file and line.
    """
    from tqdm.auto import tqdm

    from swiftcore.train.media import media_tags_to_parts

    def prepare(record: dict) -> dict:
        record = with_thinking_default(record, cfg)
        return media_tags_to_parts(record) if media is not None else record

    options = {"loss_policy": cfg.loss_policy, "max_length": cfg.max_length, "truncation": cfg.truncation}

    def encode_one(record: dict) -> Any:
        try:
            return template.encode(tokenizer, record, **options)
        except SwiftcoreError as exc:
            raise SwiftcoreError(f"{record.get('_source', '?')}: {exc}") from exc

    samples = []
    no_loss = 0
    dropped = 0
    with tqdm(total=len(records), desc=desc, unit="sample", mininterval=1.0, disable=len(records) < 2000) as bar:
        for start in range(0, len(records), ENCODE_CHUNK):
            chunk = [prepare(record) for record in records[start : start + ENCODE_CHUNK]]
            try:
                encoded = template.encode_batch(tokenizer, chunk, **options)
            except SwiftcoreError:
                encoded = [encode_one(record) for record in chunk]  # raises, naming the record
            for record, enc in zip(chunk, encoded, strict=True):
                if enc is None:  # truncation="drop"
                    dropped += 1
                elif all(label == -100 for label in enc.labels):
                    no_loss += 1
                elif media is not None and enc.media:
                    samples.append(media.expand(enc, record, max_length=cfg.max_length, lazy=True))
                else:
                    samples.append({"input_ids": list(enc.input_ids), "labels": list(enc.labels)})
            bar.update(len(chunk))
    if dropped:
        log.warning("dropped %d sample(s) longer than --max-length %d", dropped, cfg.max_length)
    if no_loss:
        log.warning("skipped %d sample(s) with no token carrying loss", no_loss)
    if not samples:
        raise SwiftcoreError(f"{desc}: no sample left to train on (see the warnings above)")
    return samples


def generation_defaults(records: list[dict], template: Any, cfg: TrainConfig) -> dict[str, Any]:
    """What inference on this run's checkpoints should default to (recorded in ``swiftcore_args.json``).

    The train/serve rule (:mod:`swiftcore.template.base`) trains each reply in its record's thinking mode;
    the checkpoint records the mode most training records were in, so ``infer`` and ``deploy`` prompt
    the model the way it was trained unless a request says otherwise.
    """
    if not template.thinking_switch:
        return {}
    on = 0
    for record in records:
        try:
            on += bool(template.thinking_mode(with_thinking_default(record, cfg)))
        except SwiftcoreError:
            continue  # encoding reports it, naming the record
    thinking = on * 2 > len(records)
    if 0 < on < len(records):
        log.info(
            "%d of %d training replies are in thinking mode: inference defaults to enable_thinking=%s",
            on,
            len(records),
            thinking,
        )
    return {"chat_template_kwargs": {"enable_thinking": thinking}}


def _collator(cfg: TrainConfig, pad_token_id: int) -> Any:
    from swiftcore.data import PaddingCollator, PaddingFreeCollator

    if cfg.packing or cfg.padding_free:
        return PaddingFreeCollator()  # takes samples or packed bins alike
    return PaddingCollator(pad_token_id)


def _pack(samples: list[dict], cfg: TrainConfig) -> list[Any]:
    if not cfg.packing:
        return samples
    from swiftcore.data import pack_samples

    return pack_samples(samples, cfg.max_length, seed=cfg.seed)


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for dist in ("swiftcore", "torch", "transformers", "peft", "accelerate"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


def run_inputs(cfg: TrainConfig) -> tuple[str, ...]:
    """The local paths a run reads (model, datasets, config file, resumed checkpoint): never removed from its
    output dir."""
    paths = [cfg.model, cfg.config_file or ""]
    for source in (*cfg.dataset, *cfg.val_dataset):
        if not str(source).startswith("hf:"):
            paths.append(str(source).rsplit("#", 1)[0])
    if cfg.resume_from_checkpoint and cfg.resume_from_checkpoint not in ("latest", "true", "True"):
        paths.append(cfg.resume_from_checkpoint)
    return tuple(p for p in paths if p)


def resolve_resume(cfg: TrainConfig, output_dir: Path, spec: Any) -> Path | None:
    """The checkpoint ``--resume-from-checkpoint`` names, checked before anything is loaded or written.

    Raises:
        SwiftcoreError: no checkpoint in ``output_dir`` for ``latest``; a path that is no training
            checkpoint (no ``trainer_state.json``); or a checkpoint of another model or task.
    """
    value = cfg.resume_from_checkpoint
    if not value:
        return None
    if value in ("latest", "true", "True"):
        from transformers.trainer_utils import get_last_checkpoint

        last = get_last_checkpoint(str(output_dir)) if output_dir.is_dir() else None
        if last is None:
            raise SwiftcoreError(
                f"--resume-from-checkpoint latest: no checkpoint-N directory in {str(output_dir)!r}; pass the "
                "checkpoint directory itself, or drop the option to start a fresh run"
            )
        checkpoint = Path(last)
    else:
        checkpoint = Path(value)
    state = checkpoint / "trainer_state.json"
    try:
        json.loads(state.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SwiftcoreError(
            f"--resume-from-checkpoint {str(checkpoint)!r}: no trainer_state.json, so it is no training "
            "checkpoint (checkpoint-N of a swiftcore train run); to start a new run from its weights, pass it "
            "as --model instead"
        ) from None
    except (OSError, ValueError) as exc:
        raise SwiftcoreError(
            f"--resume-from-checkpoint {str(checkpoint)!r}: trainer_state.json is unreadable ({exc}); the "
            "checkpoint is corrupt: resume from an earlier checkpoint-N"
        ) from exc
    args_file = checkpoint / "swiftcore_args.json"
    if args_file.is_file():
        try:
            recorded = json.loads(args_file.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise SwiftcoreError(f"{args_file}: not valid JSON ({exc}); the checkpoint is corrupt") from exc
        model = (recorded.get("model_spec") or {}).get("name")
        task = (recorded.get("swiftcore_args") or {}).get("task", "causal_lm")
        if model and model != spec.name:
            raise SwiftcoreError(
                f"--resume-from-checkpoint {str(checkpoint)!r} is a checkpoint of model {model!r}, but --model "
                f"is a {spec.name!r}; resume with the model it was trained from"
            )
        if task != cfg.task:
            raise SwiftcoreError(
                f"--resume-from-checkpoint {str(checkpoint)!r} was trained with --task {task}, this run is "
                f"--task {cfg.task}; resume with the same task"
            )
    return checkpoint


def start_run(
    cfg: TrainConfig,
    output_dir: Path,
    spec: Any,
    plugins: Any,
    *,
    fresh: bool,
    resumed_step: int | None = None,
    **extra: Any,
) -> dict:
    """Prepare ``output_dir`` (:mod:`swiftcore.train.output_dir`) and write ``args.json`` (config, model spec,
    ``extra``, the checkpoint manifest of :func:`swiftcore.models.manifest.build_manifest`, versions).

    ``extra`` may name the run's ``template`` and ``head``: a spec, or ``{"name", "provider"}``; the manifest
    records them with their plugin and version.

    A fresh run needs an empty directory, or ``--overwrite-output-dir`` on one an earlier run wrote (only
    its outputs go, never an input). A resumed run keeps everything, except the log records of the steps
    after ``resumed_step``, which it logs again. Half-written checkpoints (``.staging``) always go.

    Returns:
        The args record, which trainers also store in each checkpoint (``swiftcore_args.json``).
    """
    from swiftcore.train.output_dir import apply_output_plan, plan_output_dir, trim_log

    main = is_main_process()
    if main:  # one process decides and prepares; under torchrun the others would see its files appear
        plan = plan_output_dir(output_dir, resume=not fresh, overwrite=cfg.overwrite_output_dir, inputs=run_inputs(cfg))
        apply_output_plan(plan)
        shutil.rmtree(output_dir / ".staging", ignore_errors=True)
    if main and resumed_step is not None:
        dropped = trim_log(output_dir / "logs.jsonl", resumed_step)
        if dropped:
            log.info(
                "resuming at step %d: %d later log record(s) of the interrupted run dropped", resumed_step, dropped
            )
    from swiftcore.models.manifest import build_manifest

    record = {
        "swiftcore_args": cfg.to_dict(),
        "model_type": spec.name if not spec.provider else f"{spec.name}@{spec.provider.plugin}",
        "model_spec": {"name": spec.name, "provider": str(spec.provider)},
        **extra,
        # The checkpoint manifest (swiftcore.models.manifest): family, template, head, tuner, recipe, plugins.
        **build_manifest(cfg, spec, plugins, template=extra.get("template"), head=extra.get("head")),
        "versions": _versions(),
    }
    if main:
        (output_dir / "args.json").write_text(json.dumps(record, indent=2), encoding="utf-8")
    return record


def is_main_process() -> bool:
    """Whether this is the process that owns the output directory (rank 0 under torchrun, or the only one)."""
    return int(os.environ.get("RANK", "0")) == 0


def train_and_report(
    trainer: Any, cfg: TrainConfig, output_dir: Path, *, train_samples: int, evaluate: bool, resume: Any = None
) -> TrainResult:
    """Train, evaluate at the end unless ``--eval-steps`` evaluated along the way, plot, and summarise.

    Shared by the SFT recipe and the head recipes, so every ``swiftcore train`` run ends the same way.

    Args:
        trainer: a configured :class:`~swiftcore.train.trainer.SwiftTrainer` (or subclass).
        cfg: the run's config (``eval_steps``, ``plot``).
        output_dir: where checkpoints and ``logs.jsonl`` go.
        train_samples: how many training samples the run has (reported).
        evaluate: whether there is a validation set.
        resume: a checkpoint to resume from (None: start fresh).
    """
    from transformers.trainer_utils import get_last_checkpoint

    from swiftcore.train.trainer import plot_loss_curve

    trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    if evaluate and not cfg.eval_steps:
        trainer.evaluate()
    last = get_last_checkpoint(str(output_dir))
    log_file = output_dir / "logs.jsonl"
    plot = plot_loss_curve(log_file, output_dir / "loss.png") if (cfg.plot and log_file.exists()) else None
    losses = [r["loss"] for r in trainer.state.log_history if "loss" in r]
    return TrainResult(
        output_dir=output_dir,
        last_checkpoint=Path(last) if last else None,
        log_file=log_file,
        plot_file=plot,
        train_samples=train_samples,
        global_step=trainer.state.global_step,
        final_loss=losses[-1] if losses else None,
    )


def run_training(cfg: TrainConfig, plugins: Any) -> TrainResult:
    """Run ``cfg.recipe`` (a :class:`~swiftcore.specs.RecipeSpec` some plugin registers; ``sft`` is the core's).

    The recipe's own options (``cfg.recipe_options``) are built into its config dataclass first, when it
    declares one, so a bad value fails before anything is loaded.

    Raises:
        SwiftcoreError: no plugin provides the recipe (with close matches), or its options are invalid.
    """
    from swiftcore._lazy import resolve

    cfg.validate()
    spec = plugins.registry.find("recipe", cfg.recipe)
    if spec is None and cfg.task != "causal_lm":
        return _run_head_recipe(cfg, plugins)  # a head plugin that registers no RecipeSpec (HeadSpec.recipe)
    spec = spec or plugins.registry.get("recipe", cfg.recipe)  # raises, naming what is available
    options: Any = dict(cfg.recipe_options)
    if spec.config:
        config_cls = resolve(spec.config, what=f"config of recipe {spec.name!r} ({spec.provider})")
        try:
            options = config_cls(**options)
        except (TypeError, ValueError) as exc:
            raise SwiftcoreError(f"recipe {spec.name!r} ({spec.provider}): invalid options: {exc}") from exc
    run = resolve(spec.run, what=f"recipe {spec.name!r} ({spec.provider})")
    log.info("recipe %s (%s)", spec.name, spec.provider)
    return run(cfg, plugins, options)


def _run_head_recipe(cfg: TrainConfig, plugins: Any) -> TrainResult:
    """``--task HEAD`` for a head whose plugin names its training function in ``HeadSpec.recipe``."""
    from swiftcore._lazy import resolve

    head = plugins.registry.get("head", cfg.task)
    if head.recipe is None:
        raise SwiftcoreError(
            f"head {head.name!r} ({head.provider}) declares no training recipe (HeadSpec.recipe); "
            "it can be served but not trained by swiftcore: use a plugin whose head has one"
        )
    return resolve(head.recipe, what=f"recipe of head {head.name!r} ({head.provider})")(cfg, plugins, head)


def run_sft(cfg: TrainConfig, plugins: Any, options: Any = None) -> TrainResult:
    """The ``sft`` recipe: fine-tune ``cfg.model`` on ``cfg.dataset``; see ``swiftcore train --help``.

    Everything that can be checked before training (model directory, model type, template vs tokenizer,
    every dataset row) is checked first, so a bad input fails in seconds with a message naming it.
    """
    from swiftcore.data import load_records, split_train_val
    from swiftcore.models import check_requirements, load_model, load_tokenizer, resolve_model_spec
    from swiftcore.template import get_template

    cfg.validate()
    output_dir = Path(cfg.output_dir)
    spec = resolve_model_spec(cfg.model, plugins, model_type=cfg.model_type)
    check_requirements(spec)
    # Everything about the output directory and the checkpoint to resume is decided now, before the
    # (slow) data and model loading, and before anything on disk changes.
    from swiftcore.train.output_dir import plan_output_dir

    resume = resolve_resume(cfg, output_dir, spec)
    if is_main_process():
        plan_output_dir(
            output_dir, resume=resume is not None, overwrite=cfg.overwrite_output_dir, inputs=run_inputs(cfg)
        )
    template_name = cfg.template or spec.default_template
    if not template_name:
        raise SwiftcoreError(f"model {spec.name!r} ({spec.provider}) names no default template; pass --template")
    template_spec = plugins.registry.get("template", template_name)
    template = get_template(template_name, plugins)
    tokenizer = load_tokenizer(cfg.model)
    check_template_fits_tokenizer(template_spec, tokenizer, cfg.model)
    log.info("model %s (%s), template %s (%s)", spec.name, spec.provider, template_spec.name, template_spec.provider)

    from swiftcore.data import parse_dataset_arg

    records = load_records([parse_dataset_arg(d) for d in cfg.dataset], seed=cfg.seed, skip_bad_rows=cfg.skip_bad_rows)
    if cfg.val_dataset:
        val_records = load_records(
            [parse_dataset_arg(d) for d in cfg.val_dataset], seed=cfg.seed, skip_bad_rows=cfg.skip_bad_rows
        )
        train_records = list(records)
    elif cfg.split_ratio > 0:
        train_records, val_records = split_train_val(list(records), val_ratio=cfg.split_ratio, seed=cfg.seed)
    else:
        train_records, val_records = list(records), []
    from swiftcore.train.media import has_media, prepare_media

    media = prepare_media(spec, cfg.model, tokenizer)  # None for text-only models
    train_samples = encode_records(list(train_records), template, tokenizer, cfg, desc="encoding train", media=media)
    val_samples = (
        encode_records(list(val_records), template, tokenizer, cfg, desc="encoding val", media=media)
        if val_records
        else []
    )
    multimodal = any(has_media(s) for s in train_samples + val_samples)
    if multimodal and (cfg.packing or cfg.padding_free):
        raise SwiftcoreError("--packing / --padding-free do not support image or audio samples yet; leave them off")

    import torch

    from swiftcore.train.trainer import JsonlLogCallback, SwiftTrainer, training_arguments
    from swiftcore.train.tuners import apply_tuner, trainable_summary

    torch.manual_seed(cfg.seed)
    model = load_model(spec, cfg.model, plugins, torch_dtype="float32" if cfg.dtype == "float32" else cfg.dtype)
    model = apply_tuner(model, spec, cfg)
    log.info(trainable_summary(model))
    if cfg.gradient_checkpointing and cfg.tuner == "lora":
        model.enable_input_require_grads()  # checkpointed blocks need a grad-carrying input under LoRA

    targs = training_arguments(cfg, output_dir, evaluate=bool(val_samples), save_only_model=False)
    trainer = SwiftTrainer(
        model=model,
        args=targs,
        train_dataset=_pack(train_samples, cfg),
        eval_dataset=_pack(val_samples, cfg) if val_samples else None,
        data_collator=media.collate
        if multimodal
        else _collator(cfg, tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0),
        processing_class=tokenizer,
        callbacks=[JsonlLogCallback(output_dir / "logs.jsonl")],
    )
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
    from swiftcore.train.media import processor_files

    # A multimodal checkpoint needs its processor files to be served with media.
    trainer.checkpoint_extras = {"swiftcore_args.json": json.dumps(args_record, indent=2), **processor_files(cfg.model)}
    return train_and_report(
        trainer, cfg, output_dir, train_samples=len(train_samples), evaluate=bool(val_samples), resume=resume
    )


def _global_step(checkpoint: Path | None) -> int | None:
    """The step a checkpoint was saved at (its ``trainer_state.json``), None for no checkpoint."""
    if checkpoint is None:
        return None
    return int(json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8")).get("global_step", 0))
