"""The ``dpo.megatron`` recipe: DPO on megatron-core (``swiftcore train --engine megatron --recipe dpo``), read top to
bottom.

It is the ``dpo`` recipe of swiftcore-recipe-preference on this engine, with that recipe's own parts: its options
(``DPOOptions``), its checks and pair loading (``prepare``), its encoding of each pair with the family's template
(``encode_dpo_pairs``) and its loss, TRL's (``dpo_loss`` runs TRL 1.16's ``DPOTrainer._compute_loss`` on the log-probs
computed here). The policy's log-probs come from the sharded megatron model (megatron's vocabulary-parallel cross
entropy, so tensor parallelism never gathers the logits); the reference's are computed once before the first step, from
the initial weights (with LoRA: the model before its adapter learns anything, B = 0) or from ``--ref-model``, so no
second model stays in memory. Steps, checkpoints, LoRA and the Hugging Face export are the SFT loop's
(:mod:`~swiftcore_train_megatron.loop`), and so is ``--resume-from-checkpoint`` (the reference's log-probs are
computed from the initial weights before the checkpoint is loaded; the data order is a function of ``--seed`` and
the step), so a resumed run repeats the uninterrupted one step for step.

Under ``--pp`` each micro-batch runs through megatron-core's 1F1B schedule
(:func:`~swiftcore_train_megatron.loop.pipeline_records`) holding whole pairs, every chosen row then every rejected
one, so the last stage computes the DPO loss of its pairs as without a pipeline; the reference's log-probs and the
evaluation go through the stages forward only.

The step's loss is the mean over its pairs (every micro-batch of every data-parallel rank), as the transformers
engine's with equal micro-batches.

On a MoE family the loss also has what TRL's ``DPOTrainer`` adds for one: ``router_aux_loss_coef * aux_loss``, the
checkpoint's coefficient (:func:`~swiftcore_train_megatron.engine.router_aux_loss_coef`, TRL's rule) times
transformers' load-balancing loss of each micro-batch's forward pass over its real tokens
(:class:`~swiftcore_train_megatron.engine.RouterAuxLoss`, from the megatron routers' logits), each data-parallel rank
over its own micro-batch as each DDP rank of TRL's trainer; it is logged as ``aux_loss``. ``--ep N`` splits the
experts over N ranks, which run each micro-batch at one shape (expert parallelism gathers their tokens); ``--tp N``
splits the layers (the routers' sequence-parallel logits gathered for the aux loss). MoE under ``--pp`` / ``--cp``
and multi-token-prediction families are refused.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swiftcore_train import TrainConfig, TrainResult, is_main_process

from swiftcore.api import SwiftcoreError
from swiftcore_train_megatron.layout import ParallelLayout, world_size
from swiftcore_train_megatron.loop import TrainLoop

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = ["DPOLoop", "run_megatron_dpo"]

log = logging.getLogger("swiftcore.train.megatron")

_MEDIA = ("images", "audios", "videos")


def _dpo_options(cfg: TrainConfig) -> Any:
    """The ``dpo`` recipe's options from the flags this run was given (its defaults for the others)."""
    from swiftcore_recipe_preference import DPOOptions

    own = {f.name for f in dataclasses.fields(DPOOptions)}
    try:
        return DPOOptions(**{k: v for k, v in cfg.recipe_options.items() if k in own})
    except (TypeError, ValueError) as exc:
        raise SwiftcoreError(f"recipe 'dpo.megatron': invalid options: {exc}") from exc


def _refuse_dpo(cfg: TrainConfig, options: Any, layout: ParallelLayout) -> None:
    """What ``dpo.megatron`` does not do yet, refused by name before anything loads (besides the engine's own)."""
    problems = []
    if layout.vpp > 1:
        problems.append(f"--vpp {layout.vpp}: DPO runs megatron's plain 1F1B pipeline schedule so far; drop --vpp")
    if cfg.truncation in ("truncate_right", "truncate_left"):
        problems.append(f"--truncation {cfg.truncation}: DPO on this engine does not cut pairs; use drop or error")
    if cfg.tuner == "lora" and options.ref_model:
        problems.append("--ref-model: with --tuner lora the reference is --model before the adapter learns; drop "
                        "--ref-model, or train with --tuner full")  # fmt: skip
    if problems:
        raise SwiftcoreError("--engine megatron --recipe dpo:\n  " + "\n  ".join(problems))


def _refuse_model(bridge: Any, bridge_spec: Any, layout: ParallelLayout) -> None:
    from swiftcore_train_megatron.kto import refuse_model

    refuse_model(bridge, bridge_spec, "dpo", layout)


def run_megatron_dpo(cfg: TrainConfig, plugins: PluginSet, layout: ParallelLayout) -> TrainResult:
    """DPO-train ``cfg.model`` on ``cfg.dataset`` pairs with megatron-core (see ``swiftcore train --help``).

    Returns:
        :class:`~swiftcore_train.config.TrainResult`; each ``checkpoint-N`` is a Hugging Face model (or a peft
        adapter with LoRA) and the megatron shards, as ``sft.megatron`` saves them.
    """
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
    options = _dpo_options(cfg)
    _refuse_dpo(cfg, options, layout)
    from swiftcore_recipe_preference import check_ref_tokenizer, encode_dpo_pairs, prepare

    # prepare() refuses --resume-from-checkpoint for the transformers engine's trainer; this engine resumes.
    prepared = prepare(dataclasses.replace(cfg, resume_from_checkpoint=None), plugins, "dpo")
    if any(pair.prompt.get(k) for pair in [*prepared.train, *prepared.val] for k in _MEDIA):
        raise SwiftcoreError(
            "--engine megatron --recipe dpo: image / audio / video pairs are not supported by this engine yet; "
            "run them on the default engine (drop --engine)"
        )
    bridge_spec, bridge = _bridge(cfg, prepared.spec, plugins)
    _refuse_model(bridge, bridge_spec, layout)
    world = world_size()
    layout.check(bridge, bridge_spec, world)
    if options.ref_model:
        check_ref_tokenizer(options.ref_model, prepared.tokenizer)
        ref_bridge_spec, ref_bridge = _bridge(cfg, prepared.spec, plugins, model_dir=options.ref_model)
        _refuse_model(ref_bridge, ref_bridge_spec, layout)
        layout.check(ref_bridge, ref_bridge_spec, world)
    train = encode_dpo_pairs(prepared.train, prepared.template, prepared.tokenizer, cfg)
    val = encode_dpo_pairs(prepared.val, prepared.template, prepared.tokenizer, cfg) if prepared.val else []
    output_dir = Path(cfg.output_dir)
    resume = resume_checkpoint(cfg, output_dir, prepared.spec, layout)
    if is_main_process():
        from swiftcore_train import plan_output_dir, run_inputs

        plan_output_dir(
            output_dir, resume=resume is not None, overwrite=cfg.overwrite_output_dir, inputs=run_inputs(cfg)
        )
    log.info("dpo: model %s, bridge %s, tp %d pp %d ep %d over %d rank(s)", prepared.spec.name, bridge_spec.name,
             layout.tp, layout.pp, layout.ep, world)  # fmt: skip
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
    from dataclasses import asdict
    from importlib import metadata

    args_record = start_run(
        cfg,
        output_dir,
        prepared.spec,
        plugins,
        fresh=resume is None,
        resumed_step=_resumed_step(resume),
        template=prepared.template_spec,
        generation_defaults=generation_defaults([p.record(p.chosen) for p in prepared.train], prepared.template, cfg),
        engine=layout.record(world, bridge_spec.name),
        preference={
            "recipe": "dpo",
            "trl": metadata.version("trl"),
            **{k: list(v) if isinstance(v, tuple) else v for k, v in asdict(options).items()},
        },
    )
    loop = DPOLoop(
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


def _rows(samples: list[dict]) -> list[dict]:
    """Each pair as two causal-LM rows, TRL's layout: every chosen sequence, then every rejected one; loss (and so
    log-probs) on the reply tokens only."""
    return [
        {"input_ids": s["prompt_ids"] + s[key], "labels": [-100] * len(s["prompt_ids"]) + s[key]}
        for key in ("chosen_ids", "rejected_ids")
        for s in samples
    ]


def per_token_logps(
    model: Any, samples: list[dict], pad_token_id: int, length: int | None = None, *, pairs: int = 0, aux: Any = None
) -> tuple[Any, Any, Any]:
    """``(logps, completion_mask, aux_loss)`` of ``samples`` (DPO pairs) under the megatron model, as TRL lays them out.

    ``logps`` is ``[2B, T-1]``: at position ``t`` the log-prob of token ``t+1`` where it is a reply token, else 0
    (megatron's per-token loss is minus that log-prob, computed over the tensor-parallel vocabulary shards);
    ``completion_mask`` is ``[2B, T]``, 1 on reply tokens. ``pairs``: pad the batch to that many pairs' rows (rows
    of padding carry nothing: expert-parallel ranks run micro-batches of one shape). ``aux_loss``: the router
    load-balancing loss of the forward pass over the real tokens (``aux``, a
    :class:`~swiftcore_train_megatron.engine.RouterAuxLoss`), None without ``aux``.
    """
    import contextlib

    from swiftcore_megatron import eager_on_cpu

    from swiftcore_train_megatron.engine import model_inputs, real_tokens

    rows = _rows(samples)
    inputs = model_inputs(rows, pad_token_id, length, 2 * pairs)
    with eager_on_cpu(), aux.recording() if aux is not None else contextlib.nullcontext() as recorded:
        per_token = model(**inputs.forward_kwargs())
    aux_loss = None
    if aux is not None:
        real = real_tokens([len(r["input_ids"]) for r in rows], *inputs.input_ids.shape, inputs.input_ids.device)
        aux_loss = aux.loss(recorded, real)
    return (*_logps(per_token, inputs, len(samples)), aux_loss)


def _logps(per_token: Any, inputs: Any, pairs: int) -> tuple[Any, Any]:
    """``(logps, completion_mask)`` of a micro-batch of ``pairs`` pairs from megatron's per-token loss (rows of padding
    after its ``2 * pairs`` rows, which a pipeline's micro-batches of one shape may have, left out)."""
    import torch

    logps = -(per_token.float() * inputs.mask)  # megatron's position t scores label t+1
    completion = torch.zeros_like(inputs.mask, dtype=torch.long)
    completion[:, 1:] = inputs.mask[:, :-1].long()
    return logps[: 2 * pairs, :-1], completion[: 2 * pairs]


def reference_logps(model: Any, samples: list[dict], pad_token_id: int, batch_size: int) -> list[tuple[float, float]]:
    """``(chosen, rejected)`` summed reply log-probs of every pair under ``model`` as it is now (no gradient); under
    pipeline parallelism each batch runs through the stages (forward only) and every stage gets the last's values."""
    import torch
    from megatron.core import parallel_state

    from swiftcore_train_megatron.engine import sequence_parallel_length

    out: list[tuple[float, float]] = []
    was_training = model.training
    model.eval()
    pipeline = parallel_state.get_pipeline_model_parallel_world_size() > 1
    with torch.no_grad():
        for start in range(0, len(samples), batch_size):
            batch = samples[start : start + batch_size]
            if pipeline:
                from swiftcore_train_megatron.engine import model_inputs
                from swiftcore_train_megatron.loop import pipeline_records

                inputs = model_inputs(_rows(batch), pad_token_id)

                def summed(_k: int, per_token: Any, inputs: Any = inputs, n: int = len(batch)) -> tuple[Any, dict]:
                    sums = _logps(per_token, inputs, n)[0].sum(dim=1).double()
                    return sums.sum(), {"logps": sums.tolist()}

                (record,) = pipeline_records(model, [inputs], summed, forward_only=True)
                sums = record["logps"]
                out += list(zip(sums[: len(batch)], sums[len(batch) :], strict=True))
                continue
            length = sequence_parallel_length(model, _longest(batch))
            logps, _, _ = per_token_logps(model, batch, pad_token_id, length)
            chosen, rejected = logps.sum(dim=1).double().chunk(2)
            out += list(zip(chosen.tolist(), rejected.tolist(), strict=True))
    model.train(was_training)
    return out


def _longest(samples: list[dict]) -> int:
    """The longest sequence (prompt and the longer reply) of ``samples``' pairs."""
    return max(len(s["prompt_ids"]) + max(len(s["chosen_ids"]), len(s["rejected_ids"])) for s in samples)


class DPOLoop(TrainLoop):
    """:class:`~swiftcore_train_megatron.loop.TrainLoop` with DPO's step and evaluation.

    Args (besides the loop's):
        options: the ``dpo`` recipe's ``DPOOptions``.
        ref_train: the reference's ``(chosen, rejected)`` log-probs of each training pair.
        ref_val: the same for the validation pairs.
        aux: a MoE model's router load-balancing loss (:class:`~swiftcore_train_megatron.engine.RouterAuxLoss`),
            None where TRL adds none.
    """

    def __init__(self, *, options: Any, ref_train: list, ref_val: list, aux: Any = None, **loop: Any) -> None:
        super().__init__(**loop)
        self.options = options
        self.ref_train = ref_train
        self.ref_val = ref_val
        self.aux = aux
        self._metric_names: list[str] = []  # under --pp: the names of the metrics the last stage sent

    def _pairs_loss(
        self, samples: list[dict], refs: list[tuple[float, float]], *, training: bool, length: int = 0, pairs: int = 0
    ) -> tuple:
        """``(loss, metrics)`` of one batch of pairs: TRL's DPO loss (mean over the pairs) on the megatron log-probs,
        plus, on a MoE model, TRL's ``router_aux_loss_coef * aux_loss`` over the batch's real tokens (the batch one
        data-parallel rank of TRL's trainer runs); padded to at least ``length`` positions and ``pairs`` pairs."""
        length = self._padded(max(length, _longest(samples)))
        logps, completion, aux_loss = per_token_logps(self.model, samples, self.pad_token_id, length, pairs=pairs,
                                                      aux=self.aux)  # fmt: skip
        loss, metrics = self._dpo_loss(logps, completion, refs, training=training)
        if aux_loss is not None:
            loss = loss + self.aux.coef * aux_loss
            metrics = {**metrics, "aux_loss": float(aux_loss.detach())}
        return loss, metrics

    def _dpo_loss(self, logps: Any, completion: Any, refs: list[tuple[float, float]], *, training: bool) -> tuple:
        import torch
        from swiftcore_recipe_preference import dpo_loss

        ref = torch.tensor(refs, dtype=logps.dtype, device=logps.device)
        return dpo_loss(logps, completion, ref[:, 0], ref[:, 1], self.options, training=training)

    def _pipeline_losses(
        self, batches: list[list[int]], samples: list[dict], refs: list, *, weight: int, training: bool
    ) -> list[list[float]]:
        """Every micro-batch of ``batches`` (indices into ``samples`` and ``refs``) through the pipeline stages, a
        micro-batch's pairs whole in it (the loss sees each pair's chosen and rejected rows): its ``[loss,
        *metrics]`` on every stage, the gradients those of each micro-batch's loss times its share of ``weight``
        pairs (when ``training``). The micro-batches share one shape (the stages exchange activations of one)."""
        from swiftcore_train_megatron.engine import model_inputs
        from swiftcore_train_megatron.loop import pipeline_records

        length = self._padded(max(_longest([samples[i] for i in batch]) for batch in batches))
        rows = 2 * max(len(batch) for batch in batches)
        inputs = [
            model_inputs(_rows([samples[i] for i in batch]), self.pad_token_id, length, rows) for batch in batches
        ]

        def loss_of(k: int, per_token: Any) -> tuple[Any, dict]:
            batch = batches[k]
            logps, completion = _logps(per_token, inputs[k], len(batch))
            loss, metrics = self._dpo_loss(logps, completion, [refs[i] for i in batch], training=training)
            return loss * (len(batch) / weight), {"values": [float(loss.detach()), *metrics.values()],
                                                   "names": list(metrics)}  # fmt: skip

        records = pipeline_records(self.model, inputs, loss_of, forward_only=not training)
        self._metric_names = records[0]["names"]
        return [record["values"] for record in records]

    def _train_step(self) -> tuple[float, float, int]:
        """One optimiser step over every micro-batch of every data-parallel rank; ``(loss, grad norm, tokens)``.

        Each micro-batch's loss (the mean over its pairs) is weighted by its share of the step's pairs, so the
        gradients are those of the mean over all of them; the step's metrics are pair means too.
        """
        import torch
        import torch.distributed as dist
        from megatron.core import parallel_state

        per_rank = self.schedule.micro_batches(self.step)
        step_pairs = sum(len(mb) for batches in per_rank for mb in batches)
        mine = per_rank[parallel_state.get_data_parallel_rank()]
        device = next(self.model.parameters()).device
        if self.layout.pp > 1:
            every = self._pipeline_losses(mine, self.train_samples, self.ref_train, weight=step_pairs, training=True)
            names = self._metric_names
        else:
            every = []  # each micro-batch's loss, then each metric
            for k, batch in enumerate(mine):
                # Micro-batch k of every data-parallel rank at one shape (expert parallelism gathers their tokens).
                shared = [batches[k] for batches in per_rank] if self.layout.ep > 1 else [batch]
                loss, metrics = self._pairs_loss(
                    [self.train_samples[i] for i in batch],
                    [self.ref_train[i] for i in batch],
                    training=True,
                    length=max(_longest([self.train_samples[i] for i in b]) for b in shared),
                    pairs=max(len(b) for b in shared),
                )
                (loss * (len(batch) / step_pairs)).backward()
                every.append([float(loss.detach()), *metrics.values()])
                names = list(metrics)
        # summed over this rank's pairs
        sums = sum(
            torch.tensor(v, dtype=torch.float64, device=device) * len(b) for b, v in zip(mine, every, strict=True)
        )
        dp_group = parallel_state.get_data_parallel_group()
        if dist.get_world_size(dp_group) > 1:
            dist.all_reduce(sums, group=dp_group)
        means = (sums / step_pairs).tolist()
        self._step_metrics = dict(zip(names, means[1:], strict=True))
        norm = self._apply_gradients()
        tokens = sum(
            len(self.train_samples[i]["prompt_ids"]) * 2
            + len(self.train_samples[i]["chosen_ids"])
            + len(self.train_samples[i]["rejected_ids"])
            for batches in per_rank
            for mb in batches
            for i in mb
        )
        return means[0], norm, tokens

    def _eval_record(self) -> dict[str, float]:
        """``eval_loss`` and TRL's ``eval_rewards/*`` and ``eval_logps/*`` over the validation pairs (pair means;
        every rank scores all of them, in batches of ``--batch-size``)."""
        import torch

        totals: dict[str, float] = {}
        self.model.eval()
        with torch.no_grad():
            size = self.cfg.batch_size
            for start in range(0, len(self.val_samples), size):
                batch = self.val_samples[start : start + size]
                if self.layout.pp > 1:  # each batch alone through the stages (forward only), at its own shape
                    indices = list(range(start, start + len(batch)))
                    (values,) = self._pipeline_losses([indices], self.val_samples, self.ref_val, weight=1,
                                                      training=False)  # fmt: skip
                    record = dict(zip(["loss", *self._metric_names], values, strict=True))
                else:
                    loss, metrics = self._pairs_loss(batch, self.ref_val[start : start + size], training=False)
                    record = {"loss": float(loss), **metrics}
                for name, value in record.items():
                    totals[name] = totals.get(name, 0.0) + value * len(batch)
        self.model.train()
        return {f"eval_{name}": value / len(self.val_samples) for name, value in totals.items()}
