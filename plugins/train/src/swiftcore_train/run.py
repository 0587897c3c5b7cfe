"""What every training recipe shares: encoding records, the run start, resuming, training and reporting.

The ``sft`` recipe (:mod:`swiftcore_train.sft`), the head recipes and the preference and RL recipes all
start a run with :func:`start_run` (output directory, ``args.json``, the checkpoint manifest) and end it
with :func:`train_and_report`, so every ``swiftcore train`` run leaves the same files behind.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swiftcore.api import SwiftcoreError
from swiftcore.api.template import ENCODE_CHUNK, SampleEncoder
from swiftcore_train.config import TrainConfig, TrainResult

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = [
    "ENCODE_CHUNK",
    "check_recipe_fits_model",
    "check_template_fits_tokenizer",
    "encode_records",
    "generation_defaults",
    "is_main_process",
    "load_template",
    "load_train_val_records",
    "resolve_resume",
    "run_inputs",
    "sample_encoder",
    "start_run",
    "train_and_report",
    "with_thinking_default",
]

log = logging.getLogger("swiftcore.train")


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


def check_recipe_fits_model(cfg: TrainConfig, spec: Any, plugins: PluginSet) -> None:
    """Refuse a model the run's recipe does not train: none of the recipe's ``RecipeSpec.tasks`` is among the
    model's ``ModelSpec.tasks`` (an encoder-only family declares no ``causal_lm``, so ``sft`` cannot train it).

    Head recipes do not call this: a head goes on any backbone.

    Raises:
        SwiftcoreError: naming both sides and what to do.
    """
    recipe = plugins.registry.find("recipe", cfg.recipe)
    if recipe is None or not recipe.tasks or set(recipe.tasks) & set(spec.tasks):
        return
    raise SwiftcoreError(
        f"model {spec.name!r} ({spec.provider}) is trained for {', '.join(spec.tasks)} (its ModelSpec.tasks), "
        f"recipe {recipe.name!r} ({recipe.provider}) trains {', '.join(recipe.tasks)}: pick a recipe for this model "
        "(`swiftcore recipes`), or a head with --task"
    )


def load_template(cfg: TrainConfig, spec: Any, plugins: PluginSet) -> tuple[Any, Any, Any]:
    """``(template spec, template, tokenizer)`` of a run: ``--template`` or the model's default, checked against
    the tokenizer (every special token it emits must be one token).

    Raises:
        SwiftcoreError: the model names no default template and none is given, the template is unknown, or it
            does not fit the tokenizer.
    """
    from swiftcore.api.models import load_tokenizer
    from swiftcore.api.template import get_template

    name = cfg.template or spec.default_template
    if not name:
        raise SwiftcoreError(f"model {spec.name!r} ({spec.provider}) names no default template; pass --template")
    template_spec = plugins.registry.get("template", name)
    template = get_template(name, plugins)
    tokenizer = load_tokenizer(cfg.model)
    check_template_fits_tokenizer(template_spec, tokenizer, cfg.model)
    return template_spec, template, tokenizer


def load_train_val_records(cfg: TrainConfig) -> tuple[list[dict], list[dict]]:
    """The run's training and validation records: ``--val-dataset`` when given, else ``--split-ratio`` of the
    training data held out (none without either); every row checked (``--skip-bad-rows`` skips and counts)."""
    from swiftcore_data import load_records, parse_dataset_arg, split_train_val

    records = load_records([parse_dataset_arg(d) for d in cfg.dataset], seed=cfg.seed, skip_bad_rows=cfg.skip_bad_rows)
    if cfg.val_dataset:
        val_records = load_records(
            [parse_dataset_arg(d) for d in cfg.val_dataset], seed=cfg.seed, skip_bad_rows=cfg.skip_bad_rows
        )
        return list(records), list(val_records)
    if cfg.split_ratio > 0:
        return split_train_val(list(records), val_ratio=cfg.split_ratio, seed=cfg.seed)
    return list(records), []


def sample_encoder(template: Any, tokenizer: Any, cfg: TrainConfig, media: Any = None) -> SampleEncoder:
    """The run's :class:`~swiftcore.api.template.SampleEncoder`: ``--enable-thinking/--disable-thinking`` as the
    records' default thinking mode (a record's own wins), ``media`` for a multimodal model."""
    defaults = {} if cfg.enable_thinking is None else {"enable_thinking": cfg.enable_thinking}
    return SampleEncoder(template, tokenizer, media=media, chat_defaults=defaults)


def with_thinking_default(record: dict, cfg: TrainConfig) -> dict:
    """``record`` with ``--enable-thinking/--disable-thinking`` as its default thinking mode (its own wins)."""
    return sample_encoder(None, None, cfg).prepare(record)


def encode_records(
    records: list[dict], template: Any, tokenizer: Any, cfg: TrainConfig, *, desc: str = "encoding", media: Any = None
) -> list[dict]:
    """Encode canonical records into training samples with the run's :func:`sample_encoder` (see
    :meth:`~swiftcore.api.template.SampleEncoder.train_samples`: the sample path inference shares)."""
    return sample_encoder(template, tokenizer, cfg, media).train_samples(
        records, loss_policy=cfg.loss_policy, max_length=cfg.max_length, truncation=cfg.truncation, desc=desc
    )


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


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for dist in ("swiftcore", "swiftcore-train", "torch", "transformers", "peft", "accelerate"):
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
    if cfg.recipe_options.get("eval_dataset"):  # --eval-every's benchmark
        paths.append(str(cfg.recipe_options["eval_dataset"]))
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
        from swiftcore_train.output_dir import last_checkpoint

        last = last_checkpoint(output_dir)
        if last is None:
            raise SwiftcoreError(
                f"--resume-from-checkpoint latest: no checkpoint-N directory in {str(output_dir)!r}; pass the "
                "checkpoint directory itself, or drop the option to start a fresh run"
            )
        checkpoint = last
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
    plugins: PluginSet,
    *,
    fresh: bool,
    resumed_step: int | None = None,
    **extra: Any,
) -> dict:
    """Prepare ``output_dir`` (:mod:`swiftcore_train.output_dir`) and write ``args.json`` (config, model spec,
    ``extra``, the checkpoint manifest of :func:`swiftcore.api.models.build_manifest`, versions).

    ``extra`` may name the run's ``template`` and ``head``: a spec, or ``{"name", "provider"}``; the manifest
    records them with their plugin and version.

    A fresh run needs an empty directory, or ``--overwrite-output-dir`` on one an earlier run wrote (only
    its outputs go, never an input). A resumed run keeps everything, except the log records of the steps
    after ``resumed_step``, which it logs again. Half-written checkpoints (``.staging``) always go.

    Returns:
        The args record, which trainers also store in each checkpoint (``swiftcore_args.json``).
    """
    from swiftcore_train.output_dir import apply_output_plan, plan_output_dir, trim_log

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
    from swiftcore.api.models import build_manifest

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
        trainer: a configured :class:`~swiftcore_train.trainer.SwiftTrainer` (or subclass).
        cfg: the run's config (``eval_steps``, ``plot``).
        output_dir: where checkpoints and ``logs.jsonl`` go.
        train_samples: how many training samples the run has (reported).
        evaluate: whether there is a validation set.
        resume: a checkpoint to resume from (None: start fresh).
    """
    from swiftcore_train.output_dir import last_checkpoint
    from swiftcore_train.trainer import plot_loss_curve

    trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    if evaluate and not cfg.eval_steps:
        trainer.evaluate()
    last = last_checkpoint(output_dir)
    log_file = output_dir / "logs.jsonl"
    plot = plot_loss_curve(log_file, output_dir / "loss.png") if (cfg.plot and log_file.exists()) else None
    losses = [r["loss"] for r in trainer.state.log_history if "loss" in r]
    from swiftcore_train.generation_eval import GenerationEvalCallback

    evaluation = next((c for c in trainer.callback_handler.callbacks if isinstance(c, GenerationEvalCallback)), None)
    best = evaluation.best if evaluation is not None else None
    return TrainResult(
        output_dir=output_dir,
        last_checkpoint=last,
        log_file=log_file,
        plot_file=plot,
        train_samples=train_samples,
        global_step=trainer.state.global_step,
        final_loss=losses[-1] if losses else None,
        eval_accuracy=evaluation.last_accuracy if evaluation is not None else None,
        best_checkpoint=output_dir / best[0] if best else None,
        best_value=best[1] if best else None,
    )
