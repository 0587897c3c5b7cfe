"""The training loop of the megatron engine: steps, logging, evaluation and checkpoints, on every rank.

Under virtual pipeline parallelism (``--vpp``) a rank's model is a list of model chunks; its checkpoint stores each
chunk as the stage of a plain pipeline of ``pp * vpp`` stages it equals (:mod:`swiftcore_megatron.pipeline`), so
the Hugging Face export and ``swiftcore export --to-hf`` read it unchanged; the rank's optimizer state goes with
its first chunk.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swiftcore_train import TrainConfig, TrainResult

from swiftcore_train_megatron.layout import ParallelLayout
from swiftcore_train_megatron.schedule import Schedule

__all__ = ["TrainLoop", "pipeline_records"]


@dataclass
class TrainLoop:
    """Train ``model`` for ``schedule.total_steps`` optimiser steps (see :meth:`run`)."""

    cfg: TrainConfig
    output_dir: Path
    model: Any
    optimizer: Any
    scheduler: Any
    schedule: Schedule
    train_samples: list[dict]
    val_samples: list[dict]
    pad_token_id: int
    bridge: Any
    bridge_name: str
    layout: ParallelLayout
    extras: dict[str, str]
    lora: tuple[Any, dict[str, bool]] | None = None  # (LoraSettings, adapted layers) with --tuner lora
    #: SFT on a MoE model whose config asks for the router load-balancing loss (``engine.RouterAuxLoss``), else None.
    aux: Any = None
    step: int = 0
    log_history: list[dict[str, Any]] = field(default_factory=list)
    _checked: bool = False
    #: Metrics of the last step besides its loss (a recipe's, e.g. DPO's rewards), averaged over the logging window.
    _step_metrics: dict[str, float] = field(default_factory=dict)

    def resume(self, checkpoint: Path) -> None:
        """Continue from ``checkpoint``: model, optimizer, schedule and RNG restored, its log kept."""
        from swiftcore_train_megatron.checkpoint import STATE_FILE, load_checkpoint

        if self.layout.vpp > 1:
            self.step = _load_chunks(checkpoint, self)
        else:
            self.step = load_checkpoint(
                checkpoint,
                model=self.model,
                optimizer=self.optimizer,
                scheduler=self.scheduler,
                tp=self.layout.tp,
                ep=self.layout.ep,
                pp=self.layout.pp,
            )
        state = json.loads((checkpoint / STATE_FILE).read_text(encoding="utf-8"))
        self.log_history = list(state.get("log_history", []))

    def run(self) -> TrainResult:
        """Train the remaining steps, logging every ``--logging-steps``, evaluating every ``--eval-steps`` (else
        once at the end when there is validation data), saving every ``--save-steps`` and at the end."""
        import torch.distributed as dist
        from swiftcore_train import plot_loss_curve
        from tqdm.auto import tqdm

        rank0 = dist.get_rank() == 0
        total = self.schedule.total_steps
        bar = tqdm(total=total, initial=self.step, desc="training (megatron)", disable=not rank0)
        window: list[float] = []
        metrics: list[dict[str, float]] = []
        start, tokens = time.perf_counter(), 0
        last_saved = None
        self.model.train()
        while self.step < total:
            # The rate this step trains at: what transformers logs for the step.
            learning_rate = self.scheduler.get_last_lr()[0]
            loss, norm, step_tokens = self._train_step()
            self.step += 1
            tokens += step_tokens
            window.append(loss)
            metrics.append(self._step_metrics)
            bar.update(1)
            if self.step % self.cfg.logging_steps == 0 or self.step == total:
                record = {
                    "loss": sum(window) / len(window),
                    "grad_norm": norm,
                    "learning_rate": learning_rate,
                }
                for name in metrics[-1]:
                    record[name] = sum(m[name] for m in metrics) / len(metrics)
                elapsed = time.perf_counter() - start
                if elapsed > 0:
                    record["tokens_per_second"] = round(tokens / elapsed, 1)
                self._log(record)
                bar.set_postfix(loss=f"{record['loss']:.4f}")
                window, metrics = [], []
            if self.val_samples and self.cfg.eval_steps and self.step % self.cfg.eval_steps == 0:
                self._log(self._eval_record())
            if self.step % self.cfg.save_steps == 0:
                last_saved = self._save()
        bar.close()
        self._log(_peak_memory())
        if self.val_samples and not self.cfg.eval_steps:
            self._log(self._eval_record())
        if last_saved is None or last_saved.name != f"checkpoint-{self.step}":
            last_saved = self._save()
        log_file = self.output_dir / "logs.jsonl"
        plot = None
        if rank0 and self.cfg.plot and log_file.exists():
            plot = plot_loss_curve(log_file, self.output_dir / "loss.png")
        losses = [r["loss"] for r in self.log_history if "loss" in r]
        return TrainResult(
            output_dir=self.output_dir,
            last_checkpoint=last_saved,
            log_file=log_file,
            plot_file=plot,
            train_samples=len(self.train_samples),
            global_step=self.step,
            final_loss=losses[-1] if losses else None,
        )

    def _train_step(self) -> tuple[float, float, int]:
        """One optimiser step over every micro-batch of every data-parallel rank; ``(loss, grad norm, tokens)``.

        The loss is the step's token-weighted next-token loss, plus with :attr:`aux` (SFT on a MoE checkpoint with
        ``output_router_logits`` true) each micro-batch's ``coef * aux_loss`` summed over the micro-batches of every
        data-parallel rank, as transformers' Trainer adds the model's unscaled term; :meth:`_evaluate` leaves it out.
        """
        import torch
        from megatron.core import parallel_state

        from swiftcore_train_megatron.cp import reduce_loss_sum
        from swiftcore_train_megatron.engine import (
            label_tokens,
            micro_batch_loss,
            model_inputs,
            pipeline_loss,
            scale_mtp_loss,
        )

        per_rank = self.schedule.micro_batches(self.step)
        # Every rank holds every sample, so the step's label-token count needs no collective.
        step_tokens = sum(label_tokens(self._samples(mb)) for batches in per_rank for mb in batches)
        scale_mtp_loss(step_tokens)
        mine = per_rank[parallel_state.get_data_parallel_rank()]
        if self.layout.pp > 1:
            # The stages exchange activations of one shape: every micro-batch of the step padded to the longest.
            length = self._padded(max(len(s["input_ids"]) for b in per_rank for mb in b for s in self._samples(mb)))
            rows = max(len(mb) for batches in per_rank for mb in batches)
            inputs = [model_inputs(self._samples(batch), self.pad_token_id, length, rows) for batch in mine]
            loss_sum = pipeline_loss(self.model, self._whole_groups(inputs), step_tokens)
        else:
            loss_sum = torch.zeros((), device=next(self.model.parameters()).device)
            aux_sum = torch.zeros((), dtype=torch.float64, device=loss_sum.device)
            for k, batch in enumerate(mine):
                # Micro-batch k of every data-parallel rank padded to one length (expert parallelism gathers them).
                length = self._padded(
                    max(len(self.train_samples[i]["input_ids"]) for batches in per_rank for i in batches[k])
                )
                if self.aux is None:
                    loss = micro_batch_loss(self.model, self._samples(batch), self.pad_token_id, length)
                    (loss / max(step_tokens, 1)).backward()
                else:
                    loss, aux_term = self._with_router_loss(batch, length)
                    (loss / max(step_tokens, 1) + aux_term).backward()
                    aux_sum += float(aux_term.detach())
                loss_sum += loss.detach()
        # Every data-parallel replica's loss, and under --cp every context-parallel rank's share of the sequences.
        reduce_loss_sum(loss_sum, parallel_state.get_data_parallel_group(with_context_parallel=True))
        if self.aux is not None:  # each rank's micro-batches' terms, summed as transformers' Trainer sums them
            reduce_loss_sum(aux_sum, parallel_state.get_data_parallel_group())
        norm = self._apply_gradients()
        tokens = sum(len(self.train_samples[i]["input_ids"]) for batches in per_rank for mb in batches for i in mb)
        aux_total = float(aux_sum) if self.aux is not None else 0.0
        return float(loss_sum) / max(step_tokens, 1) + aux_total, norm, tokens

    def _with_router_loss(self, batch: list[int], length: int) -> tuple[Any, Any]:
        """``(summed token loss, coef * router load-balancing loss)`` of one micro-batch: the load-balancing loss
        (``engine.RouterAuxLoss``) over its real tokens, as the transformers model computes it from its
        ``attention_mask``; the term is added unscaled, as that model adds it to its own loss."""
        from swiftcore_megatron import eager_on_cpu

        from swiftcore_train_megatron.engine import _summed_loss, model_inputs, real_tokens

        samples = self._samples(batch)
        inputs = model_inputs(samples, self.pad_token_id, length)
        with eager_on_cpu(), self.aux.recording() as recorded:
            loss = _summed_loss(inputs, self.model(**inputs.forward_kwargs()))
        rows, positions = inputs.input_ids.shape
        real = real_tokens([len(s["input_ids"]) for s in samples], rows, positions, inputs.input_ids.device)
        return loss, self.aux.coef * self.aux.loss(recorded, real)

    def _apply_gradients(self) -> float:
        """The end of every step, whatever its loss: gradients reduced over the ranks, checked (first step),
        clipped, the optimiser and schedule stepped; returns the gradient norm before clipping."""
        from swiftcore_train_megatron.engine import (
            check_replicated_gradients,
            clip_gradients,
            gradient_norm,
            reduce_gradients,
            reduce_tied_embedding,
        )

        reduce_gradients(self.model, self.bridge)
        reduce_tied_embedding(self.model)
        if not self._checked:  # the first step of this process (also after a resume)
            check_replicated_gradients(self.model)
            self._checked = True
        norm = gradient_norm(self.model)
        clip_gradients(self.model, self.cfg.max_grad_norm, norm)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    def _padded(self, length: int) -> int:
        """``length`` rounded up to a multiple of the tensor-parallel size under sequence parallelism (each rank
        holds an equal slice of the sequence)."""
        from swiftcore_train_megatron.engine import model_chunks

        tp = self.layout.tp if model_chunks(self.model)[0].config.sequence_parallel else 1
        return -(-length // tp) * tp

    def _whole_groups(self, inputs: list[Any]) -> list[Any]:
        """``inputs`` completed to a multiple of ``--pp`` micro-batches under ``--vpp`` (megatron's interleaved
        schedule runs them in groups of ``--pp``; the last step of an epoch may hold fewer) with micro-batches
        that carry no loss and so no gradient."""
        if self.layout.vpp == 1 or not len(inputs) % self.layout.pp:
            return inputs
        from dataclasses import replace

        blank = replace(inputs[0], mask=inputs[0].mask.new_zeros(inputs[0].mask.shape))
        return inputs + [blank] * (self.layout.pp - len(inputs) % self.layout.pp)

    def _samples(self, indices: list[int]) -> list[dict]:
        return [self.train_samples[i] for i in indices]

    def _eval_record(self) -> dict[str, float]:
        """What an evaluation logs: ``eval_loss`` (a recipe's loop may add its own metrics)."""
        return {"eval_loss": self._evaluate()}

    def _evaluate(self) -> float:
        """Token-mean loss over the validation samples (batches of ``--batch-size``, split over data-parallel ranks)."""
        import torch
        from megatron.core import parallel_state

        from swiftcore_train_megatron.cp import reduce_loss_sum
        from swiftcore_train_megatron.engine import label_tokens, micro_batch_loss, model_inputs, pipeline_loss

        dp, rank = parallel_state.get_data_parallel_world_size(), parallel_state.get_data_parallel_rank()
        # Over several data-parallel ranks, one sample a batch: every rank's batches then have one shape.
        size = self.cfg.batch_size if dp == 1 else 1
        batches = [self.val_samples[i : i + size] for i in range(0, len(self.val_samples), size)]
        mine = batches[rank::dp]
        longest = self._padded(max(len(s["input_ids"]) for s in self.val_samples))
        # Every rank runs as many batches of one shape (expert parallelism gathers them); extras count nothing.
        runs = [(mine[i] if i < len(mine) else batches[0], i < len(mine)) for i in range(-(-len(batches) // dp))]
        self.model.eval()
        with torch.no_grad():
            if self.layout.pp > 1:
                inputs = [model_inputs(batch, self.pad_token_id, longest, size) for batch, _ in runs]
                for one, (_, counts) in zip(inputs, runs, strict=True):
                    if not counts:
                        one.mask.zero_()
                total = pipeline_loss(self.model, self._whole_groups(inputs), 1, forward_only=True)
            else:
                total = torch.zeros((), device=next(self.model.parameters()).device)
                for batch, counts in runs:
                    loss = micro_batch_loss(self.model, batch, self.pad_token_id, longest)
                    total += loss if counts else 0.0
        self.model.train()
        reduce_loss_sum(total, parallel_state.get_data_parallel_group(with_context_parallel=True))
        return float(total) / max(label_tokens(self.val_samples), 1)

    def _log(self, record: dict[str, Any]) -> None:
        """Append ``record`` (with step and epoch) to the log history and, on rank 0, to ``logs.jsonl``."""
        import torch.distributed as dist

        record = {"step": self.step, "epoch": self.schedule.epoch_of(self.step), **record}
        self.log_history.append(record)
        if dist.get_rank() == 0:
            with (self.output_dir / "logs.jsonl").open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(record) + "\n")

    def _trainer_state(self) -> dict[str, Any]:
        return {
            "global_step": self.step,
            "epoch": self.schedule.epoch_of(self.step),
            "max_steps": self.schedule.total_steps,
            "engine": "megatron",
            "log_history": self.log_history,
        }

    def _save(self) -> Path:
        from swiftcore_train_megatron.checkpoint import save_checkpoint

        if self.layout.vpp > 1:
            return _save_chunks(self)
        return save_checkpoint(
            self.output_dir,
            self.step,
            model=self.model,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            bridge=self.bridge,
            bridge_name=self.bridge_name,
            model_dir=self.cfg.model,
            tp=self.layout.tp,
            ep=self.layout.ep,
            pp=self.layout.pp,
            lora=self.lora,
            trainer_state=self._trainer_state(),
            extras=self.extras,
            save_total_limit=self.cfg.save_total_limit,
        )


def pipeline_records(
    model: Any,
    batches: list[Any],
    loss_of: Callable[[int, Any], tuple[Any, dict[str, Any]]],
    *,
    forward_only: bool = False,
) -> list[dict[str, Any]]:
    """Run ``batches`` (``ModelInputs`` of one shape) through the pipeline stages with megatron-core's schedule (1F1B;
    gradients included unless ``forward_only``) and return each micro-batch's record, on every stage.

    ``loss_of(k, per_token)`` runs on the last stage with micro-batch ``k``'s per-token losses (megatron's, ``[rows,
    positions]``) and returns ``(loss, record)``: the loss whose gradient the backward pass takes, as it is (so a
    recipe weights its micro-batches itself: DPO by their share of the step's pairs), and a record of plain values
    (floats, lists), which the other stages receive from the last. Unlike the token-mean loss of SFT
    (:func:`~swiftcore_train_megatron.engine.pipeline_loss`), this lets a loss see a whole micro-batch at once: a DPO
    pair's chosen and rejected rows, which sit in one micro-batch.
    """
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from swiftcore_megatron import eager_on_cpu, pipeline_on_cpu

    from swiftcore_train_megatron.engine import model_chunks

    chunks = model_chunks(model)
    for chunk in chunks:
        # megatron then leaves the returned loss unscaled (no division by tokens or micro-batches) and the backward
        # pass starts from it as it is.
        chunk.config.calculate_per_token_loss = True
        chunk.config.grad_scale_func = None
        chunk.config.microbatch_group_size_per_vp_stage = parallel_state.get_pipeline_model_parallel_world_size()

    def forward_step(data_iterator: Any, stage_model: Any) -> tuple[Any, Any]:
        k, inputs = next(data_iterator)

        def loss_func(per_token: Any) -> tuple[Any, Any, dict[str, Any]]:
            loss, record = loss_of(k, per_token)
            return loss, torch.ones((), dtype=torch.int), {"record": record}

        return stage_model(**inputs.forward_kwargs()), loss_func

    rows, length = batches[0].input_ids.shape
    numbered = list(enumerate(batches))
    with eager_on_cpu(), pipeline_on_cpu():
        results = get_forward_backward_func()(
            forward_step_func=forward_step,
            data_iterator=[iter(numbered) for _ in chunks] if len(chunks) > 1 else iter(numbered),
            model=chunks,
            num_microbatches=len(batches),
            seq_length=length,
            micro_batch_size=rows,
            forward_only=forward_only,
        )
    records = [result["record"] for result in results] if results else None  # the last stage's; the others none
    shared = [records]
    dist.broadcast_object_list(
        shared,
        src=parallel_state.get_pipeline_model_parallel_last_rank(),
        group=parallel_state.get_pipeline_model_parallel_group(),
    )
    return shared[0]


def _chunk_files(root: Path, layout: ParallelLayout) -> list[Path]:
    """This rank's files in a ``--vpp`` checkpoint: its model chunks as the stages of a ``pp * vpp`` pipeline."""
    from megatron.core import parallel_state
    from swiftcore_megatron import rank_file

    tp_rank = parallel_state.get_tensor_model_parallel_rank()
    ep_rank = parallel_state.get_expert_model_parallel_rank()
    pp_rank, stages = parallel_state.get_pipeline_model_parallel_rank(), layout.pp * layout.vpp
    return [
        rank_file(root, tp_rank, ep_rank, layout.ep, pp_rank=chunk * layout.pp + pp_rank, pp=stages)
        for chunk in range(layout.vpp)
    ]


def _save_chunks(loop: TrainLoop) -> Path:
    """``save_checkpoint`` for ``--vpp``: a file per model chunk, as the stage of a ``pp * vpp`` pipeline it is (the
    optimizer and schedule in the first); collective."""
    import shutil

    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state

    from swiftcore.api import SwiftcoreError
    from swiftcore_train_megatron.checkpoint import MCORE_SUBDIR, STAGING_DIR, _finish
    from swiftcore_train_megatron.engine import model_chunks

    layout, name = loop.layout, f"checkpoint-{loop.step}"
    staging = loop.output_dir / STAGING_DIR
    mcore = staging / f"{name}.{MCORE_SUBDIR}"
    rank0 = dist.get_rank() == 0
    if rank0:
        shutil.rmtree(staging, ignore_errors=True)
        mcore.mkdir(parents=True)
    dist.barrier()
    try:
        if parallel_state.get_expert_data_parallel_rank() == 0:  # one copy of each shard
            for k, (chunk, path) in enumerate(zip(model_chunks(loop.model), _chunk_files(mcore, layout), strict=True)):
                path.parent.mkdir(parents=True, exist_ok=True)
                first = k == 0
                state = {
                    "model": chunk.state_dict(),
                    "optimizer": loop.optimizer.state_dict() if first else {},
                    "scheduler": loop.scheduler.state_dict() if first else {},
                    "rng_state": torch.get_rng_state(),
                    "iteration": loop.step,
                    "checkpoint_version": 3.0,
                    "virtual_pipeline": [layout.pp, layout.vpp, k],
                }
                torch.save(state, path)
        dist.barrier()
        if rank0:
            sizes = (layout.tp, layout.ep, layout.pp * layout.vpp)
            _finish(loop.output_dir, staging, mcore, name, loop.bridge, loop.bridge_name, loop.cfg.model, sizes,
                    loop._trainer_state(), loop.extras, loop.lora, vpp=layout.vpp)  # fmt: skip
            from transformers.trainer_utils import rotate_checkpoints

            limit = loop.cfg.save_total_limit
            rotate_checkpoints(output_dir=str(loop.output_dir), save_total_limit=limit, use_mtime=False)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise SwiftcoreError(
            f"saving {name} in {loop.output_dir} failed ({exc.strerror or exc}); nothing was written under that "
            "name and the earlier checkpoints are intact: free space and continue with --resume-from-checkpoint latest"
        ) from exc
    dist.barrier()
    return loop.output_dir / name


def _load_chunks(checkpoint: Path, loop: TrainLoop) -> int:
    """``load_checkpoint`` for ``--vpp``: this rank's chunks, optimizer, schedule and RNG; returns the step.

    Raises:
        SwiftcoreError: the checkpoint was not saved at this ``--tp/--pp/--vpp/--ep``.
    """
    import torch
    from swiftcore_megatron import load_into_model

    from swiftcore.api import SwiftcoreError
    from swiftcore_train_megatron.checkpoint import MCORE_SUBDIR, _load_rank_state, check_resume_layout
    from swiftcore_train_megatron.engine import model_chunks

    layout = loop.layout
    check_resume_layout(checkpoint, tp=layout.tp, pp=layout.pp, vpp=layout.vpp, ep=layout.ep)
    files = _chunk_files(checkpoint / MCORE_SUBDIR, layout)
    states = [_load_rank_state(f) if f.is_file() else {} for f in files]
    saved = [s.get("virtual_pipeline", [None])[:2] for s in states]
    if any(v != [layout.pp, layout.vpp] for v in saved):
        raise SwiftcoreError(
            f"--resume-from-checkpoint {str(checkpoint)!r} was not saved by a run at --pp {layout.pp} --vpp "
            f"{layout.vpp} (--tp {layout.tp} --ep {layout.ep}); resume with the layout it was saved at"
        )
    for chunk, state in zip(model_chunks(loop.model), states, strict=True):
        load_into_model(chunk, state["model"])
    loop.optimizer.load_state_dict(states[0]["optimizer"])
    loop.scheduler.load_state_dict(states[0]["scheduler"])
    torch.set_rng_state(states[0]["rng_state"])
    return int(states[0]["iteration"])


def _peak_memory() -> dict[str, list[float]]:
    """Every rank's peak resident memory (MB), and its peak GPU memory on a GPU: ``{"peak_rss_mb": [...]}``.

    Read from ``VmHWM`` (Linux), the high-water mark of this process's own memory since its ``exec``;
    ``ru_maxrss`` would carry over the high-water mark of the process that started it.
    """
    import resource

    import torch
    import torch.distributed as dist

    try:
        status = Path("/proc/self/status").read_text(encoding="utf-8")
        peak_kb = float(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")))
    except (OSError, StopIteration):
        peak_kb = float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    mine = {"peak_rss_mb": peak_kb / 1024}
    if torch.cuda.is_available():
        mine["peak_gpu_mb"] = torch.cuda.max_memory_allocated() / 2**20
    every: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    return {key: [round(rank[key], 1) for rank in every] for key in mine}
