"""swiftcore-megatron: Hugging Face <-> Megatron-core conversion, the bridge base class and the conversion driver.

What a bridge plugin is written with is importable from here (``from swiftcore_megatron import MegatronBridge,
Rule, COLUMN, ...``); the plugin (:mod:`swiftcore_megatron.plugin`) gives ``swiftcore export`` its ``--to-mcore``
and ``--to-hf`` conversions. Bridge distributions depend on this one.

Modules (import the one you need; this package imports neither torch nor megatron):

- :mod:`~swiftcore_megatron.bridge`: :class:`MegatronBridge`, the base class bridges subclass.
- :mod:`~swiftcore_megatron.mapping`: rules tying mcore tensors to HF tensors, used in both directions.
- :mod:`~swiftcore_megatron.convert`: :func:`hf_to_mcore`, :func:`mcore_to_hf`, :func:`load_mcore_state`.
- :mod:`~swiftcore_megatron.checkpoint`: the checkpoint layout written, and streamed readers/writers.
- :mod:`~swiftcore_megatron.resolve`: which installed bridge converts a checkpoint.
- :mod:`~swiftcore_megatron.runtime`, :mod:`~swiftcore_megatron.parity`: run mcore models, check logits.
- :mod:`~swiftcore_megatron.mtp`: a GPTModel whose multi-token-prediction layers also give logits without labels.
- :mod:`~swiftcore_megatron.mtp_reference`: test helpers for MTP layers (a reference from transformers' modules,
  megatron's MTP logits at TP 1, a tiny checkpoint with a release-style MTP layer).
- :mod:`~swiftcore_megatron.perturb`: a copy of a tiny checkpoint with every tensor and rope base perturbed, so
  that parity tells every tensor apart (norms and biases of a random-init checkpoint are constants).
- :mod:`~swiftcore_megatron.cpu_patches`: what megatron-core needs to run on a CPU.
"""

from __future__ import annotations

from swiftcore_megatron.bridge import MegatronBridge
from swiftcore_megatron.errors import (
    BridgeError,
    BridgeNotFoundError,
    CheckpointError,
    MappingError,
    ParallelismError,
)
from swiftcore_megatron.mapping import COLUMN, QKV, ROW, Concat, Fuse, Rule, Shard, Tied

SWIFTCORE_API = "1.4"  # the plugin API this module was written against (a literal: see docs/writing-a-plugin.md)

__all__ = [
    "COLUMN",
    "QKV",
    "ROW",
    "SWIFTCORE_API",
    "BridgeError",
    "BridgeNotFoundError",
    "CheckpointError",
    "Concat",
    "Fuse",
    "MappingError",
    "MegatronBridge",
    "ParallelismError",
    "Rule",
    "Shard",
    "Tied",
]
