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

__all__ = ["resume_checkpoint", "run_megatron_sft"]

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
    init_adapter = cfg.recipe_options.get("lora_init_adapter")
    if init_adapter and cfg.tuner != "lora":
        problems.append(f"--lora-init-adapter {init_adapter}: starts a LoRA run; add --tuner lora or drop it")
    elif init_adapter and not (Path(init_adapter) / "adapter_config.json").is_file():
        problems.append(
            f"--lora-init-adapter {init_adapter}: no adapter_config.json there; pass a peft adapter directory"
        )
    elif init_adapter and cfg.recipe.split(".")[0] in ("dpo", "kto") and _has_update(Path(init_adapter)):
        problems.append(
            f"--lora-init-adapter {init_adapter}: a trained adapter (lora_B not zero) would move the reference of "
            f"{cfg.recipe.split('.')[0]} (the model before the adapter learns, the base model with LoRA); start from "
            "an untrained adapter, or merge this one into --model (swiftcore export --merge-lora)"
        )
    if problems:
        raise SwiftcoreError("--engine megatron:\n  " + "\n  ".join(problems))


def _has_update(adapter_dir: Path) -> bool:
    """Whether a peft adapter's ``lora_B`` tensors are not all zero (it was trained: it changes the model)."""
    from safetensors import safe_open

    path = adapter_dir / "adapter_model.safetensors"
    if not path.is_file():
        return False
    with safe_open(str(path), framework="pt") as file:
        return any(bool(file.get_tensor(k).any()) for k in file.keys() if ".lora_B." in k)


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
    aux_coef = _sft_router_loss(cfg, bridge, bridge_spec, layout)
    world = world_size()
    layout.check(bridge, bridge_spec, world, micro_batches=cfg.gradient_accumulation_steps)

    resume = resume_checkpoint(cfg, output_dir, spec, layout)
    if is_main_process():
        from swiftcore_train import plan_output_dir

        plan_output_dir(
            output_dir, resume=resume is not None, overwrite=cfg.overwrite_output_dir, inputs=run_inputs(cfg)
        )
    train_records, val_records = load_train_val_records(cfg)  # every row checked before the tokenizer loads
    template_spec, template, tokenizer = load_template(cfg, spec, plugins)
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

    from swiftcore_train_megatron.engine import RouterAuxLoss, load_sharded_model

    init_model_parallel(layout.tp, layout.ep, pp=layout.pp, vpp=layout.vpp, cp=layout.cp, seed=cfg.seed)
    model = load_sharded_model(bridge, cfg.model, tp=layout.tp, ep=layout.ep)
    aux = RouterAuxLoss(model, aux_coef) if aux_coef else None
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
        engine=layout.record(world, bridge_spec.name),
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
        aux=aux,
    )
    if resume is not None:
        loop.resume(resume)
    return loop.run()


def _sft_router_loss(cfg: TrainConfig, bridge: Any, bridge_spec: Any, layout: ParallelLayout) -> float:
    """The weight of the router load-balancing loss SFT adds on this model (0.0: none), as the transformers engine
    adds it (``engine.router_aux_loss_coef(rule="sft")``: a MoE config with ``output_router_logits`` true).

    Raises:
        SwiftcoreError: the loss is on and the layout splits what it is computed over (every MoE layer's router
            logits of whole sequences in one pipeline stage: ``--pp 1 --cp 1``; ``--tp`` and ``--ep`` any, the
            sequence-parallel slices of ``--tp`` gathered by ``engine.RouterAuxLoss``).
    """
    from swiftcore_train_megatron.engine import router_aux_loss_coef

    coef = router_aux_loss_coef(cfg.model, rule="sft") if bridge.num_experts() > 0 else 0.0
    split = [f"--{k} {v}" for k, v in (("pp", layout.pp), ("cp", layout.cp)) if v > 1]
    if coef and split:
        raise SwiftcoreError(
            f"--engine megatron: {' '.join(split)}: bridge {bridge_spec.name!r} builds MoE layers and the model's "
            f"config.json sets output_router_logits true, so SFT adds the router load-balancing loss (coefficient "
            f"{coef}), which this engine computes over every MoE layer's logits of whole sequences within one "
            "pipeline stage so far; train at --pp 1 --cp 1 (split it with --tp or --ep), or set output_router_logits "
            "to false in config.json to train without it"
        )
    return coef


def _add_lora(cfg: TrainConfig, spec: Any, bridge: Any, model: Any) -> tuple[Any, dict[str, bool]]:
    """LoRA on this rank's layers (``swiftcore_train_megatron.lora``): the settings and every adapted layer of the
    whole model (each pipeline stage adapts its own; all ranks learn all of them)."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    from swiftcore_train_megatron.engine import model_chunks, pipeline_stage
    from swiftcore_train_megatron.lora import LoraSettings, add_lora, load_peft_adapter

    targets = tuple(cfg.target_modules or spec.lora_target_modules)
    settings = LoraSettings(rank=cfg.lora_rank, alpha=cfg.lora_alpha, dropout=cfg.lora_dropout, targets=targets)
    init_adapter = cfg.recipe_options.get("lora_init_adapter")
    mine: dict[str, bool] = {}
    chunks = model_chunks(model)
    try:
        # Under --vpp each model chunk is its own stage (megatron's virtual pipeline rank names which).
        for index, chunk in enumerate(chunks):
            if len(chunks) > 1:
                parallel_state.set_virtual_pipeline_model_parallel_rank(index)
            stage = pipeline_stage(bridge)
            mine.update(add_lora(chunk, bridge, settings, seed=cfg.seed, stage=stage))
            if init_adapter:
                load_peft_adapter(chunk, bridge, settings, Path(init_adapter), stage=stage)
    finally:
        if len(chunks) > 1:
            parallel_state.set_virtual_pipeline_model_parallel_rank(0)
    every: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    modules = {name: column for rank in every for name, column in rank.items()}
    if not modules:
        from swiftcore_train_megatron.lora import no_layer_matched

        raise no_layer_matched(settings)
    log.info("LoRA r=%d alpha=%d on %d layer(s)", settings.rank, settings.alpha, len(modules))
    return settings, dict(sorted(modules.items()))


def resume_checkpoint(cfg: TrainConfig, output_dir: Path, spec: Any, layout: ParallelLayout) -> Path | None:
    """The checkpoint ``--resume-from-checkpoint`` names (None without it), checked before any process group: a
    training checkpoint of this model and task (``resolve_resume``), saved by this recipe and at this layout.

    Raises:
        SwiftcoreError: no such checkpoint, or one of another model, task, recipe or parallel layout.
    """
    resume = resolve_resume(cfg, output_dir, spec)
    if resume is None:
        return None
    from swiftcore_train_megatron.checkpoint import check_resume_layout

    args_file = resume / "swiftcore_args.json"
    if args_file.is_file():  # resolve_resume read it already: valid JSON
        recorded = json.loads(args_file.read_text(encoding="utf-8")).get("swiftcore_args") or {}
        # A DPO run resumed from an SFT checkpoint would load weights and optimizer state of another objective
        # (and a reward model's score layer would be missing): the recipe must be the one that saved it.
        saved, mine = str(recorded.get("recipe", "sft")).split(".")[0], cfg.recipe.split(".")[0]
        if saved != mine:
            raise SwiftcoreError(
                f"--resume-from-checkpoint {str(resume)!r} was saved by --recipe {saved}, this run is --recipe "
                f"{mine}: resume with --recipe {saved}, or start a new {mine} run from its weights (--model)"
            )
    check_resume_layout(resume, tp=layout.tp, pp=layout.pp, vpp=layout.vpp, ep=layout.ep)
    return resume


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
