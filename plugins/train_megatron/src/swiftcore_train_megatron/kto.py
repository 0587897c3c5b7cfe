"""The ``kto.megatron`` recipe: KTO on megatron-core (``swiftcore train --engine megatron --recipe kto``), read top to
bottom.

It is the ``kto`` recipe of swiftcore-recipe-preference on this engine, with that recipe's own parts: its options
(``KTOOptions``), its checks (``prepare``), its rows (``load_unpaired``, shuffled once with ``--seed`` and read in
order, each row's KL reply its batch neighbour's, as the transformers engine's trainer reads them), its batch default
(``kto_batch_size``), its encoding (``encode_kto_examples``) and its loss: ``kto_loss`` (that package's) runs TRL
1.16's own ``KTOTrainer._compute_loss`` on the log-probs computed here (one definition of the loss, TRL's, as for
``dpo.megatron``). The policy's log-probs come from the sharded megatron model (vocabulary-parallel cross entropy);
the reference's, of each row and of its KL row, are computed once before the first step from the initial weights
(with LoRA: before the adapter learns) or from ``--ref-model``. Steps, checkpoints, LoRA and the Hugging Face export
are the SFT loop's (:mod:`~swiftcore_train_megatron.loop`), and so is ``--resume-from-checkpoint``: the reference's
log-probs are computed from the initial weights before the checkpoint is loaded, and the rows' order is a function
of ``--seed`` and the step, so a resumed run repeats the uninterrupted one step for step. Under ``--pp`` each
micro-batch (its rows, then their KL rows, whose log-probs are detached) runs through megatron-core's 1F1B schedule
(:func:`~swiftcore_train_megatron.loop.pipeline_records`) and the last stage computes its loss as without a pipeline.

Each micro-batch's loss is the mean over its rows and the step's loss the mean of its micro-batches (TRL's trainer:
the batch's loss divided by the accumulation steps, averaged over data-parallel ranks); the KL estimate ``z_ref`` is
the mean over every data-parallel rank's micro-batch, as accelerate gathers it.

On a MoE family each micro-batch's loss also has what TRL's ``KTOTrainer`` adds for one: ``router_aux_loss_coef *
aux_loss`` of the rows' forward pass (not the KL rows'), as ``dpo.megatron`` adds it
(:class:`~swiftcore_train_megatron.engine.RouterAuxLoss`), logged as ``aux_loss`` (the data-parallel ranks' mean);
``--ep N`` splits the experts, ``--tp N`` the layers. MoE under ``--pp`` / ``--cp`` and multi-token-prediction
families are refused (:func:`refuse_model`, shared with ``rm.megatron``, which refuses MoE families and ``--ep``
still).
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import fields, replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swiftcore_train import TrainConfig, TrainResult, is_main_process

from swiftcore.api import SwiftcoreError
from swiftcore_train_megatron.layout import ParallelLayout, world_size
from swiftcore_train_megatron.loop import TrainLoop
from swiftcore_train_megatron.schedule import Schedule

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = ["KTOLoop", "run_megatron_kto"]

log = logging.getLogger("swiftcore.train.megatron")


def recipe_options(cfg: TrainConfig, cls: Any, recipe: str) -> Any:
    """A preference recipe's options (``cls``) from the flags this run was given (its defaults for the others)."""
    own = {f.name for f in fields(cls)}
    try:
        return cls(**{k: v for k, v in cfg.recipe_options.items() if k in own})
    except (TypeError, ValueError) as exc:
        raise SwiftcoreError(f"recipe {recipe!r}: invalid options: {exc}") from exc


def refuse_preference(
    cfg: TrainConfig, layout: ParallelLayout, recipe: str, *, pipeline: bool = False, experts: bool = False
) -> list[str]:
    """What a preference recipe on this engine does not do yet (``recipe``: ``kto`` or ``rm``), as problem lines
    (``pipeline``: the recipe runs through pipeline stages, on megatron's plain 1F1B schedule; ``experts``: it trains
    MoE families, so ``--ep`` splits their experts)."""
    problems = []
    if layout.pp > 1 and not pipeline:
        problems.append(f"--pp {layout.pp}: {recipe} does not run through pipeline stages yet; use --tp (and --pp 1)")
    if layout.vpp > 1 and pipeline:
        problems.append(f"--vpp {layout.vpp}: {recipe} runs megatron's plain 1F1B pipeline schedule so far; drop --vpp")
    if layout.ep > 1 and not experts:
        problems.append(f"--ep {layout.ep}: {recipe} on this engine trains dense families only so far; use --ep 1")
    if cfg.truncation in ("truncate_right", "truncate_left"):
        problems.append(f"--truncation {cfg.truncation}: {recipe} on this engine does not cut rows; use drop or error")
    if getattr(layout, "cp", 1) > 1:
        problems.append(f"--cp {layout.cp}: {recipe} on this engine does not split sequences yet; use --cp 1")
    return problems


def refuse_model(bridge: Any, bridge_spec: Any, recipe: str, layout: ParallelLayout | None = None) -> None:
    """Refuse what a preference recipe cannot train of a family: multi-token-prediction layers (megatron adds their
    loss to the gradients from the labels; TRL's trainers have no such term); MoE layers without ``layout`` (``rm``),
    or with MoE under ``--pp`` / ``--cp`` (``dpo``, ``kto``: the router load-balancing loss is computed from every
    MoE layer's logits over whole sequences in one pipeline stage: ``--pp 1 --cp 1``, ``--tp`` and ``--ep`` any;
    under ``--tp`` the sequence-parallel slices are gathered, ``engine.RouterAuxLoss``)."""
    if any(rule.mcore.startswith("mtp.") for rule in bridge.rules()):
        raise SwiftcoreError(
            f"--engine megatron --recipe {recipe}: bridge {bridge_spec.name!r} builds multi-token-prediction (MTP) "
            "layers, whose loss megatron adds to the gradients and which the transformers engine's trainer does not "
            f"train, so the {recipe} loss would differ; train a family without MTP layers, or run --recipe {recipe} "
            "on the default engine (drop --engine)"
        )
    if bridge.num_experts() == 0:
        return
    if layout is None:
        raise SwiftcoreError(
            f"--engine megatron --recipe {recipe}: bridge {bridge_spec.name!r} builds MoE layers, which {recipe} on "
            f"this engine does not train yet; train a dense family, or run --recipe {recipe} on the default engine "
            "(drop --engine)"
        )
    split = [f"--{k} {v}" for k, v in (("pp", layout.pp), ("cp", getattr(layout, "cp", 1))) if v > 1]
    if split:
        raise SwiftcoreError(
            f"--engine megatron --recipe {recipe}: {' '.join(split)}: bridge {bridge_spec.name!r} builds MoE layers, "
            f"whose router load-balancing loss {recipe} on this engine computes over every MoE layer's logits of "
            "whole sequences within one pipeline stage so far; train it at --pp 1 --cp 1 (split it with --tp or "
            "--ep)"
        )


def _refuse_kto(cfg: TrainConfig, options: Any, layout: ParallelLayout) -> None:
    problems = refuse_preference(cfg, layout, "KTO", pipeline=True, experts=True)
    if cfg.tuner == "lora" and options.ref_model:
        problems.append("--ref-model: with --tuner lora the reference is --model before the adapter learns; drop "
                        "--ref-model, or train with --tuner full")  # fmt: skip
    if options.loss_type == "kto" and cfg.batch_size < 2:
        problems.append(f"--batch-size {cfg.batch_size}: the kto loss needs at least 2 rows a batch (its KL "
                        "estimate pairs each row with another row of the batch); give 2 or more")  # fmt: skip
    if problems:
        raise SwiftcoreError("--engine megatron --recipe kto:\n  " + "\n  ".join(problems))


class _InOrder(Schedule):
    """The run's batches in the rows' order (TRL's KTO samples sequentially: each row's KL reply is fixed by its
    batch neighbours); the rows were shuffled once with ``--seed`` before encoding."""

    @cache  # noqa: B019 - as Schedule's: one entry per epoch (here the same batches every epoch)
    def _epoch_batches(self, epoch: int) -> list[list[list[int]]]:
        from accelerate.data_loader import BatchSamplerShard
        from torch.utils.data import BatchSampler

        batches = BatchSampler(range(self.num_samples), self.batch_size, drop_last=False)
        if self.data_parallel == 1:
            return [list(batches)]
        return [
            list(BatchSamplerShard(batches, self.data_parallel, rank, split_batches=False, even_batches=True))
            for rank in range(self.data_parallel)
        ]


def with_kl_replies(samples: list[dict], batch_size: int) -> list[dict]:
    """Each sample with ``kl_ids``: the reply of the row before it in its batch of ``batch_size`` consecutive rows
    (the first row takes the batch's last), the mismatched pairs TRL's ``kto`` recipe builds for ``z_ref``."""
    out = []
    for start in range(0, len(samples), batch_size):
        chunk = samples[start : start + batch_size]
        out += [{**s, "kl_ids": chunk[i - 1]["completion_ids"]} for i, s in enumerate(chunk)]
    return out


def run_megatron_kto(cfg: TrainConfig, plugins: PluginSet, layout: ParallelLayout) -> TrainResult:
    """KTO-train ``cfg.model`` on ``cfg.dataset``'s labelled replies with megatron-core (``swiftcore train --help``).

    Returns:
        :class:`~swiftcore_train.config.TrainResult`; each ``checkpoint-N`` is a Hugging Face model (or a peft
        adapter with LoRA) and the megatron shards, as ``sft.megatron`` saves them.
    """
    from dataclasses import asdict

    from swiftcore_recipe_preference import (
        KTOOptions,
        check_ref_tokenizer,
        encode_kto_examples,
        kto_batch_size,
        load_unpaired,
        prepare,
        split_pairs,
    )
    from swiftcore_train import generation_defaults, start_run

    from swiftcore_train_megatron.engine import router_aux_loss_coef
    from swiftcore_train_megatron.recipe import (
        _add_lora,
        _bridge,
        _refuse_unsupported,
        _resumed_step,
        _schedule_and_optimizer,
        resume_checkpoint,
    )

    cfg.validate()
    _refuse_unsupported(cfg)
    options = recipe_options(cfg, KTOOptions, "kto.megatron")
    cfg = kto_batch_size(cfg)  # the kto recipe's default batch when --batch-size is not given
    _refuse_kto(cfg, options, layout)
    # prepare() refuses --resume-from-checkpoint for the transformers engine's trainer; this engine resumes.
    prepared = prepare(replace(cfg, resume_from_checkpoint=None), plugins, "kto", load=False)
    examples = load_unpaired(cfg.dataset, skip_bad_rows=cfg.skip_bad_rows)
    if cfg.val_dataset:
        train_examples, val_examples = examples, load_unpaired(cfg.val_dataset, skip_bad_rows=cfg.skip_bad_rows)
    else:
        train_examples, val_examples = split_pairs(examples, cfg.split_ratio, cfg.seed)
    random.Random(cfg.seed).shuffle(train_examples)  # the kto recipe's order: shuffled once, then read in order
    bridge_spec, bridge = _bridge(cfg, prepared.spec, plugins)
    refuse_model(bridge, bridge_spec, "kto", layout)
    world = world_size()
    layout.check(bridge, bridge_spec, world)
    if options.ref_model:
        check_ref_tokenizer(options.ref_model, prepared.tokenizer)
        ref_bridge_spec, ref_bridge = _bridge(cfg, prepared.spec, plugins, model_dir=options.ref_model)
        refuse_model(ref_bridge, ref_bridge_spec, "kto", layout)
        layout.check(ref_bridge, ref_bridge_spec, world)
    train = encode_kto_examples(train_examples, prepared.template, prepared.tokenizer, cfg)
    val = encode_kto_examples(val_examples, prepared.template, prepared.tokenizer, cfg) if val_examples else []
    if options.loss_type == "kto":
        train, val = with_kl_replies(train, cfg.batch_size), with_kl_replies(val, cfg.batch_size)
    output_dir = Path(cfg.output_dir)
    resume = resume_checkpoint(cfg, output_dir, prepared.spec, layout)
    if is_main_process():
        from swiftcore_train import plan_output_dir, run_inputs

        plan_output_dir(
            output_dir, resume=resume is not None, overwrite=cfg.overwrite_output_dir, inputs=run_inputs(cfg)
        )
    log.info("kto: model %s, bridge %s, tp %d ep %d over %d rank(s)", prepared.spec.name, bridge_spec.name, layout.tp,
             layout.ep, world)  # fmt: skip
    aux_coef = router_aux_loss_coef(cfg.model) if bridge.num_experts() > 0 else 0.0

    # Every check passed: only now the process group and the model.
    from swiftcore_megatron import init_model_parallel

    from swiftcore_train_megatron.engine import RouterAuxLoss, load_sharded_model

    init_model_parallel(layout.tp, layout.ep, pp=layout.pp, seed=cfg.seed)
    model = load_sharded_model(bridge, cfg.model, tp=layout.tp, ep=layout.ep)
    aux = RouterAuxLoss(model, aux_coef) if aux_coef else None
    lora = _add_lora(cfg, prepared.spec, bridge, model) if cfg.tuner == "lora" else None
    pad_id = prepared.tokenizer.pad_token_id
    pad_id = pad_id if pad_id is not None else (prepared.tokenizer.eos_token_id or 0)
    if options.ref_model:
        reference = load_sharded_model(ref_bridge, options.ref_model, tp=layout.tp, ep=layout.ep)
        ref_train, ref_val = (reference_logps(reference, s, pad_id, cfg.batch_size) for s in (train, val))
        del reference
    else:  # the initial weights (with LoRA, B = 0: the base model) are the reference
        ref_train, ref_val = (reference_logps(model, s, pad_id, cfg.batch_size) for s in (train, val))
    schedule, optimizer, scheduler = _schedule_and_optimizer(cfg, output_dir, model, len(train), layout, world)
    schedule = _InOrder(**{f.name: getattr(schedule, f.name) for f in fields(schedule)})
    args_record = start_run(
        cfg,
        output_dir,
        prepared.spec,
        plugins,
        fresh=resume is None,
        resumed_step=_resumed_step(resume),
        template=prepared.template_spec,
        generation_defaults=generation_defaults(
            [e.record() for e in train_examples if e.label], prepared.template, cfg
        ),
        engine=layout.record(world, bridge_spec.name),
        preference={"recipe": "kto", **asdict(options)},
    )
    loop = KTOLoop(
        cfg=cfg,
        output_dir=output_dir,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        schedule=schedule,
        train_samples=train,
        val_samples=val,
        pad_token_id=pad_id,
        bridge=bridge,
        bridge_name=bridge_spec.name,
        layout=layout,
        extras={"swiftcore_args.json": json.dumps(args_record, indent=2)},
        lora=lora,
        options=options,
        ref_train=ref_train,
        ref_val=ref_val,
        aux=aux,
    )
    if resume is not None:  # after the reference log-probs: they are the initial weights', not the checkpoint's
        loop.resume(resume)
    return loop.run()


def row_logps(
    model: Any, rows: list[tuple[list[int], list[int]]], pad_token_id: int, length: int | None = None, n: int = 0
) -> tuple:
    """``(logps, completion_mask)`` of ``(prompt_ids, reply_ids)`` rows under the megatron model, as TRL lays them
    out: ``logps`` ``[B, T-1]``, at position ``t`` the log-prob of token ``t+1`` where it is a reply token, else 0
    (minus megatron's per-token loss, computed over the tensor-parallel vocabulary shards); ``completion_mask``
    ``[B, T]``, 1 on reply tokens. ``n``: run at least that many rows (padding after them, left out of the result:
    expert-parallel ranks run batches of one shape)."""
    from swiftcore_megatron import eager_on_cpu

    inputs = _inputs(rows, pad_token_id, length, n)
    with eager_on_cpu():
        per_token = model(**inputs.forward_kwargs())
    return _logps(per_token, inputs, slice(0, len(rows)))


def _inputs(rows: list[tuple[list[int], list[int]]], pad_token_id: int, length: int | None = None, n: int = 0) -> Any:
    """The megatron model's inputs for ``(prompt_ids, reply_ids)`` rows (at least ``n`` rows: padding after them)."""
    from swiftcore_train_megatron.engine import model_inputs

    return model_inputs([{"input_ids": p + r, "labels": [-100] * len(p) + r} for p, r in rows], pad_token_id, length, n)


def _logps(per_token: Any, inputs: Any, rows: slice) -> tuple:
    """``row_logps``' ``(logps, completion_mask)`` of the ``rows`` of a batch, from megatron's per-token loss."""
    import torch

    logps = -(per_token[rows].float() * inputs.mask[rows])  # megatron's position t scores label t+1
    completion = torch.zeros_like(inputs.mask[rows], dtype=torch.long)
    completion[:, 1:] = inputs.mask[rows][:, :-1].long()
    return logps[:, :-1], completion


def _kl_rows(samples: list[dict]) -> list[tuple[list[int], list[int]]]:
    return [(s["prompt_ids"], s["kl_ids"]) for s in samples]


def _rows(samples: list[dict]) -> list[tuple[list[int], list[int]]]:
    return [(s["prompt_ids"], s["completion_ids"]) for s in samples]


def reference_logps(model: Any, samples: list[dict], pad_token_id: int, batch_size: int) -> list[tuple[float, Any]]:
    """``(reply, kl reply)`` summed log-probs of every row under ``model`` as it is now (no gradient); the second is
    None without KL replies (``--loss-type apo_zero_unpaired``). Under pipeline parallelism each batch (its rows,
    then its KL rows) runs through the stages, forward only, and every stage gets the last's values."""
    import torch
    from megatron.core import parallel_state

    from swiftcore_train_megatron.engine import sequence_parallel_length

    out: list[tuple[float, Any]] = []
    was_training = model.training
    model.eval()
    pipeline = parallel_state.get_pipeline_model_parallel_world_size() > 1
    with torch.no_grad():
        for start in range(0, len(samples), batch_size):
            batch = samples[start : start + batch_size]
            if pipeline:
                from swiftcore_train_megatron.loop import pipeline_records

                inputs = _inputs(_rows(batch) + (_kl_rows(batch) if "kl_ids" in batch[0] else []), pad_token_id)

                def summed(_k: int, per_token: Any, inputs: Any = inputs) -> tuple[Any, dict]:
                    sums = _logps(per_token, inputs, slice(None))[0].sum(dim=1).double()
                    return sums.sum(), {"logps": sums.tolist()}

                (record,) = pipeline_records(model, [inputs], summed, forward_only=True)
                sums, n = record["logps"], len(batch)
                out += list(zip(sums[:n], sums[n:] if len(sums) > n else [None] * n, strict=True))
                continue
            rows = _rows(batch)
            length = sequence_parallel_length(model, max(len(p) + len(r) for p, r in rows))
            logps = row_logps(model, rows, pad_token_id, length)[0].sum(dim=1).double().tolist()
            kl = [None] * len(batch)
            if "kl_ids" in batch[0]:
                kl_rows = _kl_rows(batch)
                length = sequence_parallel_length(model, max(len(p) + len(r) for p, r in kl_rows))
                kl = row_logps(model, kl_rows, pad_token_id, length)[0].sum(dim=1).double().tolist()
            out += list(zip(logps, kl, strict=True))
    model.train(was_training)
    return out


class KTOLoop(TrainLoop):
    """:class:`~swiftcore_train_megatron.loop.TrainLoop` with KTO's step and evaluation.

    Args (besides the loop's):
        options: the ``kto`` recipe's ``KTOOptions``.
        ref_train: the reference's ``(reply, kl reply)`` log-probs of each training row.
        ref_val: the same for the validation rows.
        aux: a MoE model's router load-balancing loss (:class:`~swiftcore_train_megatron.engine.RouterAuxLoss`),
            None where TRL adds none.
    """

    def __init__(self, *, options: Any, ref_train: list, ref_val: list, aux: Any = None, **loop: Any) -> None:
        super().__init__(**loop)
        self.options = options
        self.ref_train = ref_train
        self.ref_val = ref_val
        self.aux = aux
        self._window: dict[str, list[float]] = {}  # each micro-batch's metrics since the last logged step

    def _rows_loss(
        self, samples: list[dict], refs: list[tuple], *, training: bool, group: Any = None, shared: list | None = None
    ) -> tuple:
        """``(loss, metrics)`` of one batch of rows: TRL's KTO loss on the megatron log-probs, plus, on a MoE model,
        TRL's ``router_aux_loss_coef * aux_loss`` of the rows' forward pass (not the KL rows', as TRL's). ``shared``:
        the batches of every data-parallel rank that run together (expert parallelism gathers their tokens), whose
        longest rows set the shape of this one's forward passes."""
        import contextlib

        import torch

        from swiftcore_train_megatron.engine import real_tokens

        shared = shared or [samples]
        n = max(len(b) for b in shared)
        longest = max(len(s["prompt_ids"]) + len(s["completion_ids"]) for b in shared for s in b)
        rows = _rows(samples)
        recording = self.aux.recording() if self.aux is not None else contextlib.nullcontext()
        with recording as recorded:
            logps, completion = row_logps(self.model, rows, self.pad_token_id, self._padded(longest), n)
        metrics_extra, aux_loss = {}, None
        if self.aux is not None:
            length = max(self._padded(longest), max(len(p) + len(r) for p, r in rows))
            real = real_tokens([len(p) + len(r) for p, r in rows], n, length, logps.device)
            aux_loss = self.aux.loss(recorded, real)
            value = aux_loss.detach().clone()
            if group is not None and torch.distributed.get_world_size(group) > 1:  # TRL logs the ranks' mean
                torch.distributed.all_reduce(value, group=group)  # a sum: gloo has no AVG
                value /= torch.distributed.get_world_size(group)
            metrics_extra = {"aux_loss": float(value)}
        kl = None
        if "kl_ids" in samples[0]:
            kl_longest = max(len(s["prompt_ids"]) + len(s["kl_ids"]) for b in shared for s in b)
            with torch.no_grad():  # TRL: the policy's KL-row log-probs carry no gradient
                kl = row_logps(self.model, _kl_rows(samples), self.pad_token_id, self._padded(kl_longest), n)[0]
                kl = kl.sum(dim=1)
        loss, metrics = self._kto_loss(samples, logps, completion, kl, refs, training=training, group=group)
        if aux_loss is not None:
            loss = loss + self.aux.coef * aux_loss
        return loss, {**metrics, **metrics_extra}

    def _kto_loss(
        self, samples: list[dict], logps: Any, completion: Any, kl: Any, refs: list, *, training: bool, group: Any
    ) -> tuple:
        import torch

        ref = torch.tensor([r[0] for r in refs], dtype=logps.dtype, device=logps.device)
        ref_kl = torch.tensor([r[1] for r in refs], dtype=logps.dtype, device=logps.device) if kl is not None else None
        labels = torch.tensor([bool(s["label"]) for s in samples], device=logps.device)
        from swiftcore_recipe_preference import kto_loss

        return kto_loss(logps, completion, labels, kl, ref, ref_kl, self.options, training=training, group=group)

    def _pipeline_losses(
        self, batches: list[list[int]], samples: list[dict], refs: list, *, n_micro: int, training: bool, group: Any
    ) -> list[tuple[float, dict[str, float]]]:
        """Every micro-batch of ``batches`` (indices into ``samples`` and ``refs``) through the pipeline stages, its
        rows and then its KL rows in one micro-batch (the KL rows' log-probs detached, as TRL's carry no gradient):
        its ``(loss, metrics)`` on every stage, the gradients those of each loss over ``n_micro`` (when
        ``training``). The micro-batches share one shape (the stages exchange activations of one)."""
        from swiftcore_train_megatron.loop import pipeline_records

        kl = "kl_ids" in samples[0]
        rows = [_rows([samples[i] for i in b]) + (_kl_rows([samples[i] for i in b]) if kl else []) for b in batches]
        length = self._padded(max(len(p) + len(r) for batch in rows for p, r in batch))
        inputs = [_inputs(batch, self.pad_token_id, length, max(len(b) for b in rows)) for batch in rows]

        def loss_of(k: int, per_token: Any) -> tuple[Any, dict]:
            chosen, n = [samples[i] for i in batches[k]], len(batches[k])
            logps, completion = _logps(per_token, inputs[k], slice(0, n))
            kl_logps = _logps(per_token, inputs[k], slice(n, 2 * n))[0].sum(dim=1).detach() if kl else None
            loss, metrics = self._kto_loss(chosen, logps, completion, kl_logps, [refs[i] for i in batches[k]],
                                           training=training, group=group)  # fmt: skip
            return loss / n_micro, {"loss": float(loss.detach()), "metrics": metrics}

        records = pipeline_records(self.model, inputs, loss_of, forward_only=not training)
        return [(record["loss"], record["metrics"]) for record in records]

    def _train_step(self) -> tuple[float, float, int]:
        """One optimiser step over every micro-batch of every data-parallel rank; ``(loss, grad norm, tokens)``.

        Each micro-batch's loss (the mean over its rows) counts ``1 / micro-batches`` of the step, as in TRL's
        trainer; the step's loss is the mean of the micro-batch losses.
        """
        import torch
        import torch.distributed as dist
        from megatron.core import parallel_state

        per_rank = self.schedule.micro_batches(self.step)
        n_micro = sum(len(batches) for batches in per_rank)
        mine = per_rank[parallel_state.get_data_parallel_rank()]
        dp_group = parallel_state.get_data_parallel_group()
        device = next(self.model.parameters()).device
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        if self.layout.pp > 1:
            every = self._pipeline_losses(mine, self.train_samples, self.ref_train, n_micro=n_micro, training=True,
                                          group=dp_group)  # fmt: skip
        else:
            every = []  # each micro-batch's (loss, metrics)
            for k, batch in enumerate(mine):
                shared = [[self.train_samples[i] for i in b[k]] for b in per_rank] if self.layout.ep > 1 else None
                loss, metrics = self._rows_loss(
                    [self.train_samples[i] for i in batch],
                    [self.ref_train[i] for i in batch],
                    training=True,
                    group=dp_group,
                    shared=shared,
                )
                (loss / n_micro).backward()
                every.append((float(loss.detach()), metrics))
        for loss, metrics in every:
            loss_sum += loss
            for name, value in metrics.items():  # already gathered over the data-parallel ranks
                self._window.setdefault(name, []).append(value)
        if dist.get_world_size(dp_group) > 1:
            dist.all_reduce(loss_sum, group=dp_group)
        norm = self._apply_gradients()
        tokens = sum(
            len(self.train_samples[i]["prompt_ids"]) + len(self.train_samples[i]["completion_ids"])
            for batches in per_rank
            for mb in batches
            for i in mb
        )
        return float(loss_sum) / n_micro, norm, tokens

    def _log(self, record: dict[str, Any]) -> None:
        """A training record takes TRL's metrics: each the mean of its micro-batch values since the last one."""
        if "loss" in record:
            record = {**record, **{name: sum(v) / len(v) for name, v in self._window.items()}}
            self._window = {}
        super()._log(record)

    def _eval_record(self) -> dict[str, float]:
        """``eval_loss`` (a mean over the rows) and TRL's ``eval_kl``, ``eval_rewards/*`` and ``eval_logps/*`` over
        the validation rows (means of the batches' values, as TRL logs them); every rank scores all of them, in
        batches of ``--batch-size``."""
        import torch

        values: dict[str, list[float]] = {}
        self.model.eval()
        with torch.no_grad():
            size = self.cfg.batch_size
            for start in range(0, len(self.val_samples), size):
                batch = self.val_samples[start : start + size]
                if self.layout.pp > 1:  # each batch alone through the stages (forward only), at its own shape
                    indices = list(range(start, start + len(batch)))
                    ((loss, metrics),) = self._pipeline_losses([indices], self.val_samples, self.ref_val, n_micro=1,
                                                               training=False, group=None)  # fmt: skip
                else:
                    loss, metrics = self._rows_loss(batch, self.ref_val[start : start + size], training=False)
                values.setdefault("loss", []).extend([float(loss)] * len(batch))  # transformers: a mean over rows
                for name, value in metrics.items():
                    values.setdefault(name, []).append(value)
        self.model.train()
        return {f"eval_{name}": sum(v) / len(v) for name, v in values.items()}
