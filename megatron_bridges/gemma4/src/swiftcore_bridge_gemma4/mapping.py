"""Gemma 4's fused projection layouts that the shared mapping blocks do not cover.

- ``attention_k_eq_v`` layers have ``q_proj`` and ``k_proj`` but no ``v_proj`` (values are the key
  projection). Their ``linear_qkv`` holds, per query group, the group's query heads then its key
  head (:class:`QK`), so that contiguous row blocks still give whole groups to each TP rank, like
  megatron-core's own per-group q/k/v interleave (:class:`~swiftcore_megatron.mapping.QKV`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from swiftcore_megatron import Fuse, MappingError

if TYPE_CHECKING:
    import torch

__all__ = ["QK"]


@dataclass(frozen=True)
class QK(Fuse):
    """Separate q/k projections <-> ``linear_qkv`` of a k-eq-v layer: per group ``[q heads of g; k_g]``.

    Attributes:
        num_heads: query heads.
        num_groups: key heads (query groups).
        head_dim: channels per head.
    """

    num_heads: int
    num_groups: int
    head_dim: int

    arity = 2

    def to_mcore(self, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
        """``q, k`` -> for each group g: the q heads of g, then ``k_g``, stacked on dim 0."""
        import torch

        q, k = tensors
        g, d = self.num_groups, self.head_dim
        expected = (self.num_heads * d, g * d)
        if (q.shape[0], k.shape[0]) != expected:
            got = (q.shape[0], k.shape[0])
            raise MappingError(f"QK expects q/k with {expected} rows (heads x head_dim), got {got}")
        rest = tuple(q.shape[1:])
        fused = torch.cat([q.reshape(g, -1, *rest), k.reshape(g, d, *rest)], dim=1)
        return fused.reshape(-1, *rest)

    def to_hf(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """Inverse of :meth:`to_mcore`."""
        import torch

        g, d = self.num_groups, self.head_dim
        per_group = self.num_heads // g
        rest = tuple(tensor.shape[1:])
        q, k = torch.split(tensor.reshape(g, (per_group + 1) * d, *rest), [per_group * d, d], dim=1)
        return [q.reshape(-1, *rest), k.reshape(-1, *rest)]
