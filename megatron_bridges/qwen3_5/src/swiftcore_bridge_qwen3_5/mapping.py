"""Qwen3.5's tensor layouts that the shared mapping blocks do not cover: gated QKV and unequal sections.

- Gated full attention: HF's ``q_proj`` holds, per query head, the head's query then its output
  gate (``[heads, 2, head_dim]``). megatron-core's ``linear_qkv`` with ``attention_output_gate``
  holds, per query group, the group's query heads, then their gates, then the group's k head and v
  head (``attention.py``, ``get_query_key_value_tensors``): :class:`GatedQKV`.
- Gated DeltaNet: megatron-core fuses HF's ``in_proj_qkv`` (``[q; k; v]``), ``in_proj_z``,
  ``in_proj_b`` and ``in_proj_a`` into one ``in_proj`` of unequal parts (:class:`Sections`). A TP
  rank holds its slice of every part, in order (``[q_r; k_r; v_r; z_r; b_r; a_r]``), and the
  causal conv's channels are split the same way over ``[q; k; v]`` (:class:`SectionShard`).

Everything here only reshapes and slices: a round trip is bit-exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from swiftcore_megatron import Fuse, MappingError, ParallelismError, Shard

if TYPE_CHECKING:  # torch is imported by the methods: rules can be built without it
    import torch

__all__ = ["GatedQKV", "SectionShard", "Sections"]


@dataclass(frozen=True)
class GatedQKV(Fuse):
    """HF ``q_proj`` (query and gate per head), ``k_proj``, ``v_proj`` <-> mcore's gated ``linear_qkv``.

    Attributes:
        num_heads: query heads.
        num_groups: key/value heads (query groups).
        head_dim: channels per head.
    """

    num_heads: int
    num_groups: int
    head_dim: int

    arity = 3

    def to_mcore(self, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
        """``q_proj, k, v`` -> for each group g: ``q heads of g, gates of g, k_g, v_g`` on dim 0."""
        import torch

        q_gate, k, v = tensors
        g, d = self.num_groups, self.head_dim
        per_group = self.num_heads // g
        expected = (2 * self.num_heads * d, g * d, g * d)
        got = (q_gate.shape[0], k.shape[0], v.shape[0])
        if got != expected:
            raise MappingError(
                f"gated attention expects q_proj/k_proj/v_proj with {expected} rows "
                f"(q_proj holds a query and a gate per head), got {got}"
            )
        rest = tuple(q_gate.shape[1:])
        per_head = q_gate.reshape(self.num_heads, 2, d, *rest)
        query = per_head[:, 0].reshape(g, per_group * d, *rest)
        gate = per_head[:, 1].reshape(g, per_group * d, *rest)
        fused = torch.cat([query, gate, k.reshape(g, d, *rest), v.reshape(g, d, *rest)], dim=1)
        return fused.reshape(-1, *rest)

    def to_hf(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """Inverse of :meth:`to_mcore`."""
        import torch

        g, d = self.num_groups, self.head_dim
        per_group = self.num_heads // g
        rest = tuple(tensor.shape[1:])
        grouped = tensor.reshape(g, (2 * per_group + 2) * d, *rest)
        query, gate, k, v = torch.split(grouped, [per_group * d, per_group * d, d, d], dim=1)
        per_head = torch.stack(
            [query.reshape(self.num_heads, d, *rest), gate.reshape(self.num_heads, d, *rest)], dim=1
        )
        return [per_head.reshape(-1, *rest), k.reshape(-1, *rest), v.reshape(-1, *rest)]


@dataclass(frozen=True)
class Sections(Fuse):
    """HF tensors of the given row counts concatenated on dim 0 (unequal :class:`~swiftcore_megatron.mapping.Concat`).

    Attributes:
        sizes: each HF tensor's dim-0 size, in the rule's order.
    """

    sizes: tuple[int, ...]

    @property
    def arity(self) -> int:  # type: ignore[override]
        return len(self.sizes)

    def to_mcore(self, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
        """Concatenate on dim 0, refusing tensors whose sizes differ from :attr:`sizes`."""
        import torch

        got = tuple(t.shape[0] for t in tensors)
        if got != self.sizes:
            raise MappingError(f"expected HF tensors with {self.sizes} rows, got {got}")
        return torch.cat(list(tensors), dim=0)

    def to_hf(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """Split dim 0 back into :attr:`sizes`."""
        import torch

        return list(torch.split(tensor, list(self.sizes), dim=0))


@dataclass(frozen=True)
class SectionShard(Shard):
    """A tensor of unequal parts stacked on ``dim``; each part is split over TP ranks on its own.

    Rank ``r`` holds ``[part_0 slice r; part_1 slice r; ...]`` (how megatron-core's GatedDeltaNet
    splits its ``in_proj`` output and its conv channels per rank).

    Attributes:
        sections: the parts' sizes along ``dim``.
    """

    sections: tuple[int, ...] = ()

    def split(self, tensor: torch.Tensor, tp: int, what: str = "tensor") -> list[torch.Tensor]:
        """Return the ``tp`` rank shards of ``tensor``.

        Raises:
            ParallelismError: when a part's size is not divisible by ``tp``.
        """
        import torch

        if tp == 1:
            return [tensor]
        bad = [s for s in self.sections if s % tp]
        if bad:
            raise ParallelismError(
                f"{what}: parts of sizes {self.sections} on dim {self.dim} cannot each be split into {tp} "
                "tensor-parallel shards; choose a --tp that divides the linear-attention head counts"
            )
        parts = torch.split(tensor, list(self.sections), dim=self.dim)
        per_part = [torch.chunk(p, tp, dim=self.dim) for p in parts]
        return [torch.cat([pp[r] for pp in per_part], dim=self.dim) for r in range(tp)]

    def merge(self, shards: Sequence[torch.Tensor], what: str = "tensor") -> torch.Tensor:
        """Inverse of :meth:`split`."""
        import torch

        tp = len(shards)
        if tp == 1:
            return shards[0]
        local = [s // tp for s in self.sections]
        pieces = [torch.split(s, local, dim=self.dim) for s in shards]
        return torch.cat([pieces[r][b] for b in range(len(self.sections)) for r in range(tp)], dim=self.dim)
