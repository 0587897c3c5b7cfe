"""megatron-core's plain-torch norms, made to build under sequence parallelism.

The local (non-Transformer-Engine) spec builds its norms with ``WrappedTorchNorm``, which asserts that sequence
parallelism is off (``torch_norm.py``); megatron refuses to train MoE layers under tensor parallelism without it,
so a family whose local spec uses those norms (OLMoE) could not train at TP > 1. The norm itself needs nothing
for sequence parallelism: it normalises each token alone, and each rank's tokens are its slice of the sequence.
Only its weights' gradients are partial on each rank (each saw its tokens), and megatron's rule for that is to
mark them ``sequence_parallel`` and sum their gradients over the tensor-parallel group, as it does for its
Transformer Engine norms (the megatron engine's ``reduce_gradients`` follows it).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

__all__ = ["SequenceParallelTorchNorm", "with_sequence_parallel_norms"]


class SequenceParallelTorchNorm:
    """``WrappedTorchNorm`` (torch's ``RMSNorm`` or ``LayerNorm``, the same module and numerics) that also builds
    under sequence parallelism, its weights marked ``sequence_parallel``."""

    def __new__(cls, config: Any, hidden_size: int, eps: float = 1e-5, **_: Any) -> Any:
        import torch

        kinds = {"RMSNorm": torch.nn.RMSNorm, "LayerNorm": torch.nn.LayerNorm}
        if config.normalization not in kinds:
            raise ValueError(f"normalization {config.normalization!r}: only {', '.join(kinds)} are supported")
        norm = kinds[config.normalization](normalized_shape=hidden_size, eps=eps)
        for param in norm.parameters():
            param.sequence_parallel = config.sequence_parallel
        return norm


def with_sequence_parallel_norms(spec: Any) -> Any:
    """A copy of a layer or block spec with every ``WrappedTorchNorm`` replaced by
    :class:`SequenceParallelTorchNorm` (the spec given is left as it is)."""
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    def swap(node: Any, seen: set[int]) -> Any:
        if node is WrappedTorchNorm:
            return SequenceParallelTorchNorm
        if id(node) in seen or isinstance(node, (str, int, float, bool, type(None), type)):
            return node
        seen.add(id(node))
        if isinstance(node, list):
            node[:] = [swap(item, seen) for item in node]
        elif dataclasses.is_dataclass(node):
            for field in dataclasses.fields(node):
                setattr(node, field.name, swap(getattr(node, field.name), seen))
        return node

    return swap(copy.deepcopy(spec), set())
