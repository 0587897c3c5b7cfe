"""The ``grpo`` recipe: ``run(cfg, plugins, options)``, read top to bottom like the core's SFT recipe.

Everything that can be checked before training is checked first (model, template, rewards and their options,
every prompt row, the columns the rewards read, prompt lengths), so a bad input fails in seconds. The loss,
advantages and rollouts are TRL 1.16's ``GRPOTrainer`` (see :mod:`swiftcore_recipe_rl.trainer`); swiftcore
supplies the model loading and LoRA (the family's targets and exclusions), the template-encoded prompts, the
rewards, the output directory, the ``args.json`` manifest and atomic checkpoints.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any

from swiftcore_recipe_rl.options import GRPOOptions

__all__ = ["grpo_config", "run"]

log = logging.getLogger("swiftcore.rl")


def grpo_config(cfg: Any, options: GRPOOptions, output_dir: Path, *, reward_names: list[str]) -> Any:
    """TRL's ``GRPOConfig`` from the common options and the recipe's own.

    ``--batch-size`` counts prompts per device and step: each brings ``--num-generations`` completions, so
    TRL's per-device batch (which counts completions) is their product and always holds whole groups.
    """
    from swiftcore_train.trainer import training_arguments
    from trl import GRPOConfig

    weights = options.weights()
    return training_arguments(
        cfg,
        output_dir,
        evaluate=False,
        args_class=GRPOConfig,
        per_device_train_batch_size=cfg.batch_size * options.num_generations,
        fp16=cfg.dtype == "float16",
        include_num_input_tokens_seen="no",  # a GRPO batch carries prompts and completions, not input_ids
        num_generations=options.num_generations,
        max_completion_length=options.max_completion_length,
        temperature=options.rollout_temperature,
        top_p=options.rollout_top_p,
        top_k=options.rollout_top_k,
        loss_type=options.grpo_loss_type,
        beta=options.grpo_beta,
        epsilon=options.grpo_epsilon,
        epsilon_high=options.grpo_epsilon_high,
        scale_rewards=options.scale_rewards,
        num_iterations=options.num_iterations,
        mask_truncated_completions=options.mask_truncated_completions,
        reward_weights=[weights.get(name, 1.0) for name in reward_names],
        log_completions=False,
    )


def _refuse_unsupported(cfg: Any) -> None:
    from swiftcore.api import SwiftcoreError

    unsupported = {
        "--val-dataset / --split-ratio": bool(cfg.val_dataset) or cfg.split_ratio > 0,
        "--packing": cfg.packing,
        "--padding-free": cfg.padding_free,
    }
    given = [flag for flag, on in unsupported.items() if on]
    if given:
        raise SwiftcoreError(f"{', '.join(given)}: not supported by the grpo recipe yet; drop them")


def _encode_prompts(rows: list, codec: Any, cfg: Any, options: GRPOOptions) -> tuple[list[dict], dict[str, list[int]]]:
    """The TRL dataset rows (``prompt`` text + reward columns) and the text -> template ids map."""
    from swiftcore.api import SwiftcoreError

    room = cfg.max_length - options.max_completion_length
    dataset, ids_of = [], {}
    dropped = 0
    for row in rows:
        record = row.record
        if cfg.enable_thinking is not None:  # --enable-thinking/--disable-thinking: the default, a row's own wins
            kwargs = dict(record.get("chat_template_kwargs") or {})
            kwargs.setdefault("enable_thinking", cfg.enable_thinking)
            record = {**record, "chat_template_kwargs": kwargs}
        text, ids = codec.encode(record)
        if len(ids) > room:
            if cfg.truncation == "drop":
                dropped += 1
                continue
            raise SwiftcoreError(
                f"{row.where}: the prompt has {len(ids)} tokens; with --max-completion-length "
                f"{options.max_completion_length} that exceeds --max-length {cfg.max_length}: raise --max-length, "
                "shorten the prompt, or pass --truncation drop"
            )
        ids_of[text] = ids
        dataset.append({"prompt": text, **row.columns})
    if dropped:
        log.warning("dropped %d prompt(s) longer than --max-length minus --max-completion-length", dropped)
    if not dataset:
        raise SwiftcoreError("no prompt left to train on (see the warning above)")
    return dataset, ids_of


def _resume(cfg: Any, output_dir: Path) -> Path | None:
    """The checkpoint ``--resume-from-checkpoint`` names (``latest``: the newest in ``--output-dir``)."""
    from swiftcore.api import SwiftcoreError

    value = cfg.resume_from_checkpoint
    if not value:
        return None
    if value in ("latest", "true", "True"):
        from transformers.trainer_utils import get_last_checkpoint

        last = get_last_checkpoint(str(output_dir)) if output_dir.is_dir() else None
        if last is None:
            raise SwiftcoreError(f"--resume-from-checkpoint latest: no checkpoint-N directory in {str(output_dir)!r}")
        return Path(last)
    return Path(value)


def run(cfg: Any, plugins: Any, options: GRPOOptions) -> Any:
    """The ``grpo`` recipe: sample ``--num-generations`` completions per prompt, score them with the
    ``--reward`` functions, and optimise the policy with TRL's GRPO loss of ``--grpo-loss-type``."""
    from swiftcore_train.rewards import load_rewards, parse_reward_options
    from swiftcore_train.run import start_run, train_and_report

    from swiftcore.api.models import check_requirements, load_model, resolve_model_spec
    from swiftcore_recipe_rl.data import load_prompt_rows
    from swiftcore_recipe_rl.rewards import TRLReward
    from swiftcore_recipe_rl.rollout import PromptCodec, stop_token_ids

    if cfg.recipe == "sft":  # called from Python with the default: the manifest must still say grpo
        from dataclasses import replace

        cfg = replace(cfg, recipe="grpo")
    cfg.validate()
    _refuse_unsupported(cfg)
    output_dir = Path(cfg.output_dir)
    spec = resolve_model_spec(cfg.model, plugins, model_type=cfg.model_type)
    check_requirements(spec)
    rewards = load_rewards(
        plugins,
        options.reward,
        options=parse_reward_options(options.reward_option),
        fallback=options.reward_fallback,
        timeout=options.reward_timeout,
    )
    rows = load_prompt_rows(cfg.dataset, skip_bad_rows=cfg.skip_bad_rows)
    for reward in rewards:
        reward.check_columns(rows[0].columns, where=f"--dataset {', '.join(cfg.dataset)}")
    from swiftcore_train.run import check_recipe_fits_model, load_template

    check_recipe_fits_model(cfg, spec, plugins)
    template_spec, template, tokenizer = load_template(cfg, spec, plugins)
    codec = PromptCodec(template, tokenizer)
    dataset_rows, prompt_ids = _encode_prompts(rows, codec, cfg, options)
    resume = _resume(cfg, output_dir)
    log.info(
        "grpo: model %s (%s), template %s, rewards %s, %d prompts x %d generations, loss %s",
        spec.name,
        spec.provider,
        template_spec.name,
        ", ".join(f"{r.name} ({r.spec.provider})" for r in rewards),
        len(dataset_rows),
        options.num_generations,
        options.grpo_loss_type,
    )

    import torch
    from datasets import Dataset
    from swiftcore_train.trainer import JsonlLogCallback
    from swiftcore_train.tuners import apply_tuner, trainable_summary

    from swiftcore_recipe_rl.trainer import grpo_trainer_class

    torch.manual_seed(cfg.seed)
    model = load_model(spec, cfg.model, plugins, torch_dtype="float32" if cfg.dtype == "float32" else cfg.dtype)
    # Rollouts end at the template's end-of-turn, as served replies do (TRL stops at the model's eos ids).
    model.generation_config.eos_token_id = stop_token_ids(template, tokenizer)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"  # TRL pads prompts on the left for generation
    model = apply_tuner(model, spec, cfg)  # LoRA with the family's targets and exclusions, as SFT trains it
    log.info(trainable_summary(model))
    if cfg.gradient_checkpointing and cfg.tuner == "lora":
        model.enable_input_require_grads()

    reward_names = [r.name for r in rewards]
    trainer_cls = grpo_trainer_class()
    trainer = trainer_cls(
        model=model,
        reward_funcs=[TRLReward(r, codec) for r in rewards],
        args=grpo_config(cfg, options, output_dir, reward_names=reward_names),
        train_dataset=Dataset.from_list(dataset_rows),
        processing_class=tokenizer,
        callbacks=[JsonlLogCallback(output_dir / "logs.jsonl")],
    )
    trainer.prompt_ids = prompt_ids
    resumed_step = None
    if resume is not None and (resume / "trainer_state.json").is_file():
        resumed_step = int(
            json.loads((resume / "trainer_state.json").read_text(encoding="utf-8")).get("global_step", 0)
        )
    args_record = start_run(
        cfg,
        output_dir,
        spec,
        plugins,
        fresh=resume is None,
        resumed_step=resumed_step,
        template=template_spec,
        rewards=[{"name": r.name, "provider": str(r.spec.provider), "options": r.options} for r in rewards],
        grpo=asdict(options),
    )
    trainer.checkpoint_extras = {"swiftcore_args.json": json.dumps(args_record, indent=2)}
    return train_and_report(trainer, cfg, output_dir, train_samples=len(dataset_rows), evaluate=False, resume=resume)
