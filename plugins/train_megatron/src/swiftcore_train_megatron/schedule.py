"""Which samples each data-parallel rank trains on at each optimiser step.

The order is the one transformers' ``Trainer`` uses, built from the same accelerate pieces it uses
(``SeedableRandomSampler`` seeded with ``--seed`` plus the epoch, ``BatchSamplerShard`` dealing batches round-robin
to the data-parallel ranks and completing the last ones from the epoch's start), so switching ``--engine`` changes
nothing about the data: the first steps' losses of the two engines can be compared one for one, and a resumed run
finds its place from the step number alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

__all__ = ["Schedule"]


@dataclass(frozen=True)
class Schedule:
    """The batches of a run.

    Attributes:
        num_samples: training samples (or packed rows).
        batch_size: samples per rank per micro-batch (``--batch-size``).
        grad_accum: micro-batches per optimiser step (``--gradient-accumulation-steps``).
        data_parallel: data-parallel ranks.
        seed: the data seed (``--seed``, as transformers' ``data_seed``).
        max_steps: ``--max-steps`` (-1: from ``epochs``).
        epochs: ``--num-train-epochs``.
    """

    num_samples: int
    batch_size: int
    grad_accum: int
    data_parallel: int
    seed: int
    max_steps: int = -1
    epochs: float = 1.0

    @property
    def batches_per_epoch(self) -> int:
        """Micro-batches each rank sees in one epoch (transformers' ``len(train_dataloader)``)."""
        return math.ceil(math.ceil(self.num_samples / self.batch_size) / self.data_parallel)

    @property
    def steps_per_epoch(self) -> int:
        """Optimiser steps per epoch: the last one takes the remaining micro-batches."""
        return max(math.ceil(self.batches_per_epoch / self.grad_accum), 1)

    @property
    def total_steps(self) -> int:
        """Optimiser steps of the run."""
        return self.max_steps if self.max_steps > 0 else math.ceil(self.epochs * self.steps_per_epoch)

    def epoch_of(self, step: int) -> float:
        """The (fractional) epoch reached after ``step`` steps, as transformers logs it."""
        return step / self.steps_per_epoch

    def micro_batches(self, step: int) -> list[list[list[int]]]:
        """The micro-batches of optimiser step ``step`` (0-based), per data-parallel rank: ``[rank][micro][i]``."""
        epoch, within = divmod(step, self.steps_per_epoch)
        per_rank = self._epoch_batches(epoch)
        start = within * self.grad_accum
        return [batches[start : start + self.grad_accum] for batches in per_rank]

    @cache  # noqa: B019 - a frozen dataclass: the cache lives as long as the schedule, one entry per epoch
    def _epoch_batches(self, epoch: int) -> list[list[list[int]]]:
        from accelerate.data_loader import BatchSamplerShard, SeedableRandomSampler
        from torch.utils.data import BatchSampler

        sampler = SeedableRandomSampler(range(self.num_samples), data_seed=self.seed)
        sampler.set_epoch(epoch)
        order = list(sampler)
        batches = BatchSampler(order, self.batch_size, drop_last=False)
        if self.data_parallel == 1:
            return [list(batches)]
        return [
            list(BatchSamplerShard(batches, self.data_parallel, rank, split_batches=False, even_batches=True))
            for rank in range(self.data_parallel)
        ]
