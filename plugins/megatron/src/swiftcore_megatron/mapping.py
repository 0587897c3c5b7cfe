"""Mapping rules between Hugging Face and Megatron-core tensors, usable in both directions.

A :class:`Rule` ties one Megatron-core tensor to the Hugging Face tensor(s) it is made of. Its
:class:`Fuse` says how the HF tensors combine into the full (unsharded) mcore tensor and back; its
:class:`Shard` says how that full tensor is split over tensor-parallel ranks and merged again. The
converter runs the same rule list forwards (HF -> mcore: ``fuse.to_mcore`` then ``shard.split``) and
backwards (mcore -> HF: ``shard.merge`` then ``fuse.to_hf``), so a mapping is written once.

Layouts (megatron-core local spec):

- ``linear_qkv``: per query group, that group's q heads, then its k head, then its v head
  (:class:`QKV`). Contiguous row blocks of it hold whole groups, so a plain dim-0 split gives each
  TP rank its own groups.
- ``linear_fc1`` of a gated MLP: ``[gate; up]``; TP splits gate and up separately and each rank holds
  ``[gate_r; up_r]`` (:class:`Shard` with ``blocks=2``).
- Row-parallel layers (``linear_proj``, ``linear_fc2``) split on dim 1; column-parallel layers and
  the vocabulary (embedding, output layer) on dim 0; norms and the router are replicated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from swiftcore_megatron.errors import MappingError, ParallelismError

if TYPE_CHECKING:  # torch is imported by the methods: rules can be built without it
    import torch

__all__ = ["COLUMN", "COPY", "QKV", "REPLICATED", "ROW", "Concat", "Copy", "Fuse", "Rule", "Shard", "Tied"]


class Fuse:
    """How the HF tensors of a rule make the full mcore tensor, and back. The base class copies one tensor."""

    arity = 1

    def to_mcore(self, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
        """Combine the rule's HF tensors (in the rule's order) into the full mcore tensor."""
        return tensors[0]

    def to_hf(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """Split the full mcore tensor into the rule's HF tensors (in the rule's order)."""
        return [tensor]


class Copy(Fuse):
    """One HF tensor is the mcore tensor, unchanged."""

    def __repr__(self) -> str:
        return "Copy()"


COPY = Copy()


@dataclass(frozen=True)
class Concat(Fuse):
    """``n`` equally sized HF tensors concatenated on dim 0 (e.g. ``[gate; up]`` -> ``linear_fc1``)."""

    n: int = 2

    @property
    def arity(self) -> int:  # type: ignore[override]
        return self.n

    def to_mcore(self, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
        """Concatenate on dim 0, refusing tensors of different shapes (they would not split back)."""
        import torch

        shapes = {tuple(t.shape) for t in tensors}
        if len(shapes) != 1:
            raise MappingError(f"Concat expects {self.n} tensors of one shape, got shapes {sorted(shapes)}")
        return torch.cat(list(tensors), dim=0)

    def to_hf(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """Split dim 0 into ``n`` equal parts."""
        import torch

        return list(torch.chunk(tensor, self.n, dim=0))


@dataclass(frozen=True)
class Tied(Fuse):
    """``n`` HF copies of one mcore tensor: a weight the HF checkpoint stores more than once and megatron shares.

    DeepSeek-style multi-token-prediction layers, for one, store their own ``embed_tokens`` and
    ``shared_head.head``, equal to the model's embedding and output head, which megatron's MTP layers share.
    Loading keeps the first copy and refuses copies that differ (one would be lost); saving writes the
    mcore tensor to every copy, so a trained shared weight reaches all of them.
    """

    n: int = 2

    @property
    def arity(self) -> int:  # type: ignore[override]
        return self.n

    def to_mcore(self, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
        """The first copy, after checking that every other one equals it."""
        import torch

        if not all(torch.equal(tensors[0], t) for t in tensors[1:]):
            raise MappingError(
                f"Tied expects {self.n} equal copies of one shared tensor, but they differ; megatron keeps one "
                "tensor for all of them, so converting would lose the others"
            )
        return tensors[0]

    def to_hf(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """The same tensor for every copy."""
        return [tensor] * self.n


@dataclass(frozen=True)
class QKV(Fuse):
    """Separate q/k/v projections <-> mcore's fused ``linear_qkv``, interleaved per query group.

    Works for weights ``[out, in]`` and biases ``[out]`` alike (trailing dims are carried).

    Attributes:
        num_heads: query heads.
        num_groups: key/value heads (query groups).
        head_dim: channels per head (``kv_channels``).
    """

    num_heads: int
    num_groups: int
    head_dim: int

    arity = 3

    def to_mcore(self, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
        """``q, k, v`` -> for each group g: ``q heads of g, k_g, v_g`` stacked on dim 0."""
        import torch

        q, k, v = tensors
        g, d = self.num_groups, self.head_dim
        per_group = self.num_heads // g
        expected = (self.num_heads * d, g * d, g * d)
        got = (q.shape[0], k.shape[0], v.shape[0])
        if got != expected:
            raise MappingError(f"QKV expects q/k/v with {expected} rows (heads x head_dim), got {got}")
        rest = tuple(q.shape[1:])
        fused = torch.cat([q.reshape(g, per_group * d, *rest), k.reshape(g, d, *rest), v.reshape(g, d, *rest)], dim=1)
        return fused.reshape(-1, *rest)

    def to_hf(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """Inverse of :meth:`to_mcore`."""
        import torch

        g, d = self.num_groups, self.head_dim
        per_group = self.num_heads // g
        rest = tuple(tensor.shape[1:])
        grouped = tensor.reshape(g, (per_group + 2) * d, *rest)
        q, k, v = torch.split(grouped, [per_group * d, d, d], dim=1)
        return [q.reshape(-1, *rest), k.reshape(-1, *rest), v.reshape(-1, *rest)]


@dataclass(frozen=True)
class Shard:
    """How a full mcore tensor is split over tensor-parallel ranks.

    Attributes:
        dim: the split dimension, or None when every rank holds the whole tensor.
        blocks: the tensor is ``blocks`` equal parts stacked on ``dim`` (gate/up of ``linear_fc1``);
            each part is split on its own and a rank holds its slice of every part, in order.
    """

    dim: int | None = None
    blocks: int = 1

    def split(self, tensor: torch.Tensor, tp: int, what: str = "tensor") -> list[torch.Tensor]:
        """Return the ``tp`` rank shards of ``tensor`` (views; clone before saving).

        Raises:
            ParallelismError: when the split dimension is not divisible by ``tp * blocks``.
        """
        import torch

        if self.dim is None or tp == 1:
            return [tensor] * tp
        size = tensor.shape[self.dim]
        if size % (tp * self.blocks):
            raise ParallelismError(
                f"{what}: dim {self.dim} of size {size} cannot be split into {tp} tensor-parallel shards"
                f"{f' of each of its {self.blocks} parts' if self.blocks > 1 else ''}; choose a --tp that divides it"
            )
        parts = torch.chunk(tensor, self.blocks, dim=self.dim)
        per_part = [torch.chunk(p, tp, dim=self.dim) for p in parts]
        return [
            torch.cat([pp[r] for pp in per_part], dim=self.dim) if self.blocks > 1 else per_part[0][r]
            for r in range(tp)
        ]

    def merge(self, shards: Sequence[torch.Tensor], what: str = "tensor") -> torch.Tensor:
        """Inverse of :meth:`split`: rebuild the full tensor from all ranks' shards.

        Raises:
            MappingError: when a replicated tensor differs between ranks (a corrupt checkpoint).
        """
        import torch

        if self.dim is None or len(shards) == 1:
            first = shards[0]
            for r, other in enumerate(shards[1:], start=1):
                if not torch.equal(first, other):
                    raise MappingError(f"{what}: replicated tensor differs between TP rank 0 and rank {r}")
            return first
        pieces = [torch.chunk(s, self.blocks, dim=self.dim) for s in shards]
        return torch.cat([pieces[r][b] for b in range(self.blocks) for r in range(len(shards))], dim=self.dim)


REPLICATED = Shard(None)
COLUMN = Shard(0)
ROW = Shard(1)


@dataclass(frozen=True)
class Rule:
    """One mcore tensor and the HF tensor(s) it is made of.

    Attributes:
        mcore: the mcore state-dict key. For an expert tensor it holds ``{expert}``, filled with the
            expert's index local to its expert-parallel rank.
        hf: the HF state-dict keys, in the order ``fuse`` expects.
        fuse: how the HF tensors combine (default: one tensor copied).
        shard: how the full mcore tensor is split over TP ranks (default: replicated).
        expert: the global expert index for expert weights (placed by expert parallelism), else None.
    """

    mcore: str
    hf: tuple[str, ...]
    fuse: Fuse = field(default=COPY)
    shard: Shard = field(default=REPLICATED)
    expert: int | None = None

    def __post_init__(self) -> None:
        if len(self.hf) != self.fuse.arity:
            raise MappingError(
                f"rule for {self.mcore}: {self.fuse!r} takes {self.fuse.arity} HF tensors, got {self.hf}"
            )
        if (self.expert is None) == ("{expert}" in self.mcore):
            raise MappingError(f"rule for {self.mcore}: expert rules (and only they) use '{{expert}}' in the key")

    def mcore_key(self, num_local_experts: int = 1) -> str:
        """The mcore key on the rank that holds this tensor."""
        if self.expert is None:
            return self.mcore
        return self.mcore.format(expert=self.expert % num_local_experts)
