"""The trainers under sequence parallelism: per-group data (any recipe); sharded forward, exact loss (``sft``).

Layout: ranks ``g*N .. g*N+N-1`` form SP group ``g`` (:mod:`~swiftcore_sequence_parallel.groups`); the ``W/N``
groups are the data-parallel replicas. What changes against :class:`~swiftcore_train.trainer.SwiftTrainer`:

* Data: accelerate shards the dataloader over all ``W`` processes; here over the ``W/N`` groups instead, so
  every rank of a group reads the same batch (with one group, exactly the batches of a one-process run).
* Forward: each rank runs the model on its shard of the batch (``shard_batch``: labels shifted over the
  whole sequence, global position ids).
* Loss: the label-token count is the whole step's (every micro-batch of every group, counted once), each
  rank's loss is its shard's summed cross-entropy over it, times ``W``. DDP averages gradients over the ``W``
  ranks, the SP attention's backward routes each shard's gradient to the ranks that computed it, so the
  averaged gradient is the token-weighted gradient of the whole step, as transformers computes it on one
  process; the logged loss (mean over ranks) is the whole step's token-weighted loss.
"""

from __future__ import annotations

from typing import Any

from swiftcore_train import SwiftTrainer

from swiftcore.api import SwiftcoreError
from swiftcore_sequence_parallel import IGNORE_INDEX

__all__ = ["SequenceParallelData", "SequenceParallelTrainer"]

#: Collator entries that describe the *whole* packed row (flash-attention varlen metadata): wrong for a
#: shard, and unused by the SP attention (it rebuilds the layout from the global position ids).
_WHOLE_ROW_KEYS = ("seq_lens", "cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")


class SequenceParallelData:
    """Trainer mixin: the data side of sequence parallelism, for any :class:`~swiftcore_train.trainer.SwiftTrainer`.

    Every rank of an SP group reads the same batches (accelerate shards the data over the groups, not the
    ranks), evaluation values are gathered once per group, and input tokens are counted once per group.
    The loss stays the trainer's own: :class:`SequenceParallelTrainer` (sft) shards the batch itself, the head
    recipes shard inside the decoder (:mod:`~swiftcore_sequence_parallel.heads`).

    Args:
        sp_state: the active :class:`~swiftcore_sequence_parallel.groups.SequenceParallelState`.
        *args, **kwargs: the trainer's.
    """

    def __init__(self, *args: Any, sp_state: Any, **kwargs: Any) -> None:
        self.sp_state = sp_state
        super().__init__(*args, **kwargs)

    # ---- data: one stream per data-parallel group -------------------------------------------------------

    def _data_parallel(self) -> tuple[int, int]:
        """``(number of SP groups, this rank's group)``: the data-parallel size and rank."""
        size = self.sp_state.size
        return self.args.world_size // size, self.args.process_index // size

    def _per_group(self, loader: Any) -> Any:
        """Make accelerate's batch sharding hand out batches per SP group rather than per rank."""
        if self.args.world_size <= 1:
            return loader
        from accelerate.data_loader import BatchSamplerShard

        shard = getattr(loader, "batch_sampler", None)
        if not isinstance(shard, BatchSamplerShard) or shard.split_batches:
            raise SwiftcoreError(
                "--sequence-parallel-size: the dataloader is not sharded the way this trainer expects "
                f"(batch sampler {type(shard).__name__}); this accelerate version is not supported with SP"
            )
        dp_size, dp_rank = self._data_parallel()
        # Same batch on every rank of a group; the groups split the data as plain DDP over dp_size ranks would.
        shard.num_processes, shard.process_index = dp_size, dp_rank
        if dp_size == 1:
            # A lone group reads the data exactly as one process does: the last short batch stays short
            # instead of being topped up from the start of the epoch.
            shard.even_batches = False
        return loader

    def get_train_dataloader(self) -> Any:
        """The training dataloader, sharded over the SP groups (every rank of a group sees the same batch)."""
        return self._per_group(super().get_train_dataloader())

    def get_eval_dataloader(self, eval_dataset: Any = None) -> Any:
        """The evaluation dataloader, sharded over the SP groups like the training one."""
        return self._per_group(super().get_eval_dataloader(eval_dataset))

    def evaluation_loop(self, *args: Any, **kwargs: Any) -> Any:
        """:meth:`transformers.Trainer.evaluation_loop`, gathering each SP group's values once."""
        # The loop resets gather_function when it ends, so it is set again for every evaluation.
        self.gather_function = self._gather_once_per_group
        return super().evaluation_loop(*args, **kwargs)

    def _gather_once_per_group(self, data: Any, use_gather_object: bool = False) -> Any:
        """``accelerator.gather_for_metrics`` over the data-parallel groups rather than the ranks.

        The N ranks of a group hold the same batch (and the same loss): gathering all of them would weight
        every full batch N times but the truncated last one once. One copy per group, then accelerate's own
        last-batch truncation (its remainder is per group already, see :meth:`_per_group`).
        """
        del use_gather_object  # tensors only here (evaluation losses, logits, labels)
        from accelerate.utils import recursively_apply

        world, size = self.args.world_size, self.sp_state.size
        state = self.accelerator.gradient_state

        def one_copy_per_group(tensor: Any) -> Any:
            tensor = tensor.reshape(1) if tensor.dim() == 0 else tensor
            gathered = self.accelerator.gather(tensor)  # rank-major concatenation along dim 0
            kept = gathered.reshape(world, -1, *tensor.shape[1:])[::size].flatten(0, 1)
            if state.end_of_dataloader and state.remainder > 0:
                kept = kept[: state.remainder]
            return kept

        return recursively_apply(one_copy_per_group, data)

    def _track_num_input_tokens(self, inputs: Any) -> None:
        """Count input tokens as the Trainer does, but each group's batch once (its N ranks all hold it)."""
        before = self.state.num_input_tokens_seen
        super()._track_num_input_tokens(inputs)
        self.state.num_input_tokens_seen = before + (self.state.num_input_tokens_seen - before) // self.sp_state.size


class SequenceParallelTrainer(SequenceParallelData, SwiftTrainer):
    """:class:`~swiftcore_train.trainer.SwiftTrainer` training each sequence split over its SP group (``sft``).

    Args:
        sp_state: the active :class:`~swiftcore_sequence_parallel.groups.SequenceParallelState`.
        *args, **kwargs: :class:`~swiftcore_train.trainer.SwiftTrainer`'s.
    """

    # compute_loss normalises by the label tokens of the whole accumulated step: the Trainer must not divide
    # by the accumulation steps again.
    loss_is_scaled_for_ga = True

    # ---- loss ---------------------------------------------------------------------------------------

    def _get_num_items_in_batch(self, batch_samples: list, device: Any) -> Any:
        """Label tokens of the whole step (every micro-batch, every SP group counted once); None without labels.

        Counted on the full (unsharded) batches, over ``labels[..., 1:]`` as transformers counts causal-LM
        targets; every rank of a group holds the same batches, so the world sum is divided by the SP size.
        """
        import torch

        if not batch_samples or batch_samples[0].get("labels") is None:
            return None
        count = sum(int((b["labels"][..., 1:] != IGNORE_INDEX).sum()) for b in batch_samples)
        total = torch.tensor([count], dtype=torch.int64, device=device)
        if self.args.world_size > 1:
            total = self.accelerator.gather(total).sum() // self.sp_state.size
        return total.reshape(())

    def compute_loss(
        self,
        model: Any,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: Any = None,
    ) -> Any:
        """This rank's share of the whole sequence's token-weighted loss (see the module docstring).

        Training: ``sum of this shard's token losses / num_items_in_batch * world size``. Evaluation (or no
        count): the SP group's token-weighted loss of this batch, the same on every rank of the group.
        """
        import torch.nn.functional as F

        from swiftcore_sequence_parallel.loss import sequence_parallel_loss
        from swiftcore_sequence_parallel.sharding import shard_batch

        state = self.sp_state
        if inputs.get("labels") is None:
            raise SwiftcoreError("--sequence-parallel-size: a training batch without labels cannot be trained")
        batch = {k: v for k, v in inputs.items() if k not in _WHOLE_ROW_KEYS}
        shard = shard_batch(batch, state.rank, state.size)
        labels = shard.pop("shift_labels")
        shard["use_cache"] = False  # a split sequence is never decoded; a cache also hides packed boundaries
        outputs = model(**shard)
        logits = outputs["logits"] if isinstance(outputs, dict) else outputs[0]
        if model.training and num_items_in_batch is not None:
            local = F.cross_entropy(
                logits.float().reshape(-1, logits.shape[-1]),
                labels.reshape(-1).to(logits.device),
                ignore_index=IGNORE_INDEX,
                reduction="sum",
            )
            # x world size: DDP averages over every rank, while the step's gradient is the sum of the shards'.
            loss = local / num_items_in_batch.to(local.device).clamp(min=1) * self.args.world_size
        else:
            loss = sequence_parallel_loss(logits, labels, state.group)
        return (loss, outputs) if return_outputs else loss
