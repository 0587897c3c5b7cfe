"""The ``sft.megatron`` recipe: supervised fine-tuning on megatron-core, read top to bottom.

Everything checkable is checked before a process group exists (the options, the model, its bridge, the parallel
layout against the launch and the model, the data, the checkpoint to resume); then every rank loads its shard of
the HF checkpoint through the bridge, trains on transformers' data order with transformers' optimizer and
schedule, and saves checkpoints that resume exactly and that transformers loads.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swiftcore_train import (
    TrainConfig,
    TrainResult,
    check_recipe_fits_model,
    encode_records,
    generation_defaults,
    is_main_process,
    load_template,
    load_train_val_records,
    resolve_resume,
    run_inputs,
    start_run,
)

from swiftcore.api import SwiftcoreError
from swiftcore_train_megatron.layout import ParallelLayout, world_size

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = ["run_megatron_sft"]

log = logging.getLogger("swiftcore.train.megatron")


def _refuse_unsupported(cfg: TrainConfig) -> None:
    """Options the megatron engine does not do yet: refused by name before anything loads."""
    problems = []
    if cfg.tuner == "lora" and cfg.lora_exclude_modules:
        problems.append("--lora-exclude-modules: not supported by the megatron engine yet; name the layers to adapt "
                        "with --target-modules instead")  # fmt: skip
    if cfg.packing or cfg.padding_free:
        problems.append("--packing / --padding-free: not supported by the megatron engine yet; leave them off")
    if cfg.dtype != "float32":
        problems.append(f"--dtype {cfg.dtype}: the megatron engine trains in float32 so far; use --dtype float32")
    if cfg.gradient_checkpointing:
        problems.append("--gradient-checkpointing: not supported by the megatron engine yet; leave it off")
    if problems:
        raise SwiftcoreError("--engine megatron:\n  " + "\n  ".join(problems))


def _bridge(cfg: TrainConfig, spec: Any, plugins: PluginSet, model_dir: str | None = None) -> tuple[Any, Any]:
    """``(bridge spec, bridge)`` of ``model_dir`` (default ``--model``)."""
    from swiftcore_megatron import BridgeError, read_hf_config, resolve_bridge

    try:
        return resolve_bridge(read_hf_config(Path(model_dir or cfg.model)), plugins)
    except BridgeError as exc:
        raise SwiftcoreError(
            f"--engine megatron: model {spec.name!r} ({spec.provider}) cannot be trained on megatron-core: {exc}. "
            "Train it on the default engine (drop --engine), or install the family's megatron bridge plugin"
        ) from exc


def run_megatron_sft(cfg: TrainConfig, plugins: PluginSet, layout: ParallelLayout) -> TrainResult:
    """Fine-tune ``cfg.model`` on ``cfg.dataset`` with megatron-core (see ``swiftcore train --help``)."""
    from swiftcore.api.models import check_requirements, resolve_model_spec

    cfg.validate()
    _refuse_unsupported(cfg)
    output_dir = Path(cfg.output_dir)
    spec = resolve_model_spec(cfg.model, plugins, model_type=cfg.model_type)
    check_requirements(spec)
    check_recipe_fits_model(cfg, spec, plugins)
    bridge_spec, bridge = _bridge(cfg, spec, plugins)
    world = world_size()
    layout.check(bridge, bridge_spec, world, micro_batches=cfg.gradient_accumulation_steps)
    from swiftcore_train_megatron.engine import needs_sequence_parallel

    if cfg.tuner == "lora" and layout.vpp > 1:
        raise SwiftcoreError(
            f"--engine megatron --tuner lora --vpp {layout.vpp}: LoRA on virtual pipeline chunks is not supported "
            "yet; train LoRA with --pp alone (drop --vpp), or train full weights (--tuner full)"
        )
    if cfg.tuner == "lora" and needs_sequence_parallel(bridge, layout.tp):
        raise SwiftcoreError(
            f"--engine megatron --tuner lora --tp {layout.tp}: MoE layers train under tensor parallelism with "
            "sequence parallelism, which this engine's LoRA does not support yet; split the experts with --ep "
            "instead (--tp 1), or train full weights (--tuner full)"
        )
    resume = resolve_resume(cfg, output_dir, spec)
    if is_main_process():
        from swiftcore_train import plan_output_dir

        plan_output_dir(
            output_dir, resume=resume is not None, overwrite=cfg.overwrite_output_dir, inputs=run_inputs(cfg)
        )
    template_spec, template, tokenizer = load_template(cfg, spec, plugins)
    train_records, val_records = load_train_val_records(cfg)
    train_samples = encode_records(train_records, template, tokenizer, cfg, desc="encoding train")
    val_samples = encode_records(val_records, template, tokenizer, cfg, desc="encoding val") if val_records else []
    from swiftcore_media import has_media

    if any(has_media(s) for s in train_samples + val_samples):
        raise SwiftcoreError("--engine megatron: image and audio samples are not supported by this engine yet")
    log.info(
        "model %s, bridge %s, tp %d pp %d vpp %d ep %d cp %d over %d rank(s)",
        spec.name,
        bridge_spec.name,
        layout.tp,
        layout.pp,
        layout.vpp,
        layout.ep,
        layout.cp,
        world,
    )

    # Every check passed: only now the process group and the model.
    from swiftcore_megatron import init_model_parallel

    from swiftcore_train_megatron.engine import load_sharded_model

    init_model_parallel(layout.tp, layout.ep, pp=layout.pp, vpp=layout.vpp, cp=layout.cp, seed=cfg.seed)
    model = load_sharded_model(bridge, cfg.model, tp=layout.tp, ep=layout.ep)
    lora = _add_lora(cfg, spec, bridge, model) if cfg.tuner == "lora" else None
    schedule, optimizer, scheduler = _schedule_and_optimizer(cfg, output_dir, model, len(train_samples), layout, world)
    args_record = start_run(
        cfg,
        output_dir,
        spec,
        plugins,
        fresh=resume is None,
        resumed_step=_resumed_step(resume),
        template=template_spec,
        generation_defaults=generation_defaults(train_records, template, cfg),
        engine={
            "name": "megatron",
            "tp": layout.tp,
            "pp": layout.pp,
            "vpp": layout.vpp,
            "ep": layout.ep,
            "cp": layout.cp,
            "world_size": world,
            "bridge": bridge_spec.name,
        },
    )
    from swiftcore_train_megatron.loop import TrainLoop

    loop = TrainLoop(
        cfg=cfg,
        output_dir=output_dir,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        schedule=schedule,
        train_samples=train_samples,
        val_samples=val_samples,
        pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0,
        bridge=bridge,
        bridge_name=bridge_spec.name,
        layout=layout,
        extras={"swiftcore_args.json": json.dumps(args_record, indent=2)},
        lora=lora,
    )
    if resume is not None:
        loop.resume(resume)
    return loop.run()


def _add_lora(cfg: TrainConfig, spec: Any, bridge: Any, model: Any) -> tuple[Any, dict[str, bool]]:
    """LoRA on this rank's layers (``swiftcore_train_megatron.lora``): the settings and every adapted layer of the
    whole model (each pipeline stage adapts its own; all ranks learn all of them)."""
    import torch.distributed as dist

    from swiftcore_train_megatron.engine import pipeline_stage
    from swiftcore_train_megatron.lora import LoraSettings, add_lora

    targets = tuple(cfg.target_modules or spec.lora_target_modules)
    settings = LoraSettings(rank=cfg.lora_rank, alpha=cfg.lora_alpha, dropout=cfg.lora_dropout, targets=targets)
    mine = add_lora(model, bridge, settings, seed=cfg.seed, stage=pipeline_stage(bridge))
    every: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    modules = {name: column for rank in every for name, column in rank.items()}
    log.info("LoRA r=%d alpha=%d on %d layer(s)", settings.rank, settings.alpha, len(modules))
    return settings, dict(sorted(modules.items()))


def _resumed_step(checkpoint: Path | None) -> int | None:
    if checkpoint is None:
        return None
    from swiftcore_train_megatron.checkpoint import STATE_FILE

    return int(json.loads((checkpoint / STATE_FILE).read_text(encoding="utf-8")).get("global_step", 0))


def _schedule_and_optimizer(
    cfg: TrainConfig, output_dir: Path, model: Any, num_samples: int, layout: ParallelLayout, world: int
) -> tuple[Any, Any, Any]:
    """``(schedule, optimizer, lr_scheduler)``: which samples each rank trains on at each step (transformers'
    order), and transformers' optimizer and learning-rate schedule for these flags (the same class,
    hyper-parameters, weight-decay groups and warm-up as the transformers engine builds), over this rank's
    parameters."""
    from swiftcore_train import training_arguments
    from transformers import Trainer, get_scheduler

    from swiftcore_train_megatron.schedule import Schedule

    schedule = Schedule(
        num_samples=num_samples,
        batch_size=cfg.batch_size,
        grad_accum=cfg.gradient_accumulation_steps,
        data_parallel=layout.data_parallel(world),
        seed=cfg.seed,
        max_steps=cfg.max_steps,
        epochs=cfg.num_train_epochs,
    )
    total_steps = schedule.total_steps

    args = training_arguments(cfg, output_dir, evaluate=False)
    optimizer_cls, optimizer_kwargs = Trainer.get_optimizer_cls_and_kwargs(args)
    # get_decay_parameter_names reads only the model (no Trainer state): transformers' rule (no decay on biases
    # and norms, by module type and name) applied to the megatron module names.
    decay = set(Trainer.get_decay_parameter_names(None, model))  # type: ignore[arg-type]
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    groups = [
        {"params": [p for n, p in params if n in decay], "weight_decay": cfg.weight_decay},
        {"params": [p for n, p in params if n not in decay], "weight_decay": 0.0},
    ]
    optimizer = optimizer_cls(groups, **optimizer_kwargs)
    scheduler = get_scheduler(
        args.lr_scheduler_type,
        optimizer,
        num_warmup_steps=args.get_warmup_steps(total_steps),
        num_training_steps=total_steps,
        scheduler_specific_kwargs=args.lr_scheduler_kwargs,
    )
    return schedule, optimizer, scheduler
