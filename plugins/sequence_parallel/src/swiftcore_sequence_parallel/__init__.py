"""swiftcore-sequence-parallel: split one training sequence over several ranks (torch.distributed).

Building blocks, used by ``swiftcore train``'s ``sft`` and head recipes through
:mod:`~swiftcore_sequence_parallel.training` (``--sequence-parallel-size``): the options and swiftcore-train's
``swiftcore_train_check`` / ``swiftcore_train_setup`` hooks are implemented in
:mod:`~swiftcore_sequence_parallel.plugin`, so neither recipe names this package.

* :mod:`~swiftcore_sequence_parallel.sharding`: shift labels globally, then cut a batch into contiguous
  sequence shards (one per sequence-parallel rank).
* :mod:`~swiftcore_sequence_parallel.attention`: attention functions registered with transformers'
  ``AttentionInterface`` (``sp_ulysses``, ``sp_ring``, ``sp_hybrid``) that compute exact attention over the
  whole sequence while each rank only holds its shard.
* :mod:`~swiftcore_sequence_parallel.loss`: token-weighted loss over the sequence-parallel group, equal to
  the single-process loss.
* :mod:`~swiftcore_sequence_parallel.groups`: the process groups (``init_sequence_parallel``).

Importing this package is cheap: torch and transformers are imported by the functions that need them
(the modules that define autograd Functions, ``comm``, ``ulysses`` and ``ring``, import torch themselves).
"""

from __future__ import annotations

__all__ = ["ATTENTION_NAMES", "HEAD_RECIPES", "IGNORE_INDEX", "MODES"]

#: Sequence-parallel modes: all-to-all over heads, ring over key/value shards, or Ulysses inside a ring.
MODES = ("ulysses", "ring", "hybrid")

#: ``config._attn_implementation`` value that selects each mode's attention function.
ATTENTION_NAMES = {"ulysses": "sp_ulysses", "ring": "sp_ring", "hybrid": "sp_hybrid"}

#: Label value ignored by the loss (the transformers / PyTorch convention).
IGNORE_INDEX = -100

#: swiftcore-heads' recipes (its head tasks, ``TrainSetup.kind``) SP trains: their model pools one vector per sample
#: from ``model.decoder``, which is what gets split.
HEAD_RECIPES = ("classification", "embedding", "reranker", "generative_reranker")
