"""Differentiable collectives for sequence parallelism (work on gloo, so on CPU).

``torch.distributed`` collectives are not recorded by autograd, and the differentiable wrappers of
``torch.distributed.nn.functional`` are deprecated (they warn on every call), so each collective used in a
forward pass gets a small autograd Function here whose backward is the transposed collective.

Every rank of a group must run the same collectives in the same order, backward included: callers pack
the tensors of one step into a single tensor (one collective instead of several) so that autograd's
scheduling can never interleave them differently on two ranks.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

__all__ = [
    "all_gather",
    "all_gather_nograd",
    "all_reduce_sum",
    "all_to_all",
    "chain_neighbours",
    "chain_shift",
    "exchange",
    "ring_shift",
]


def _size(group: Any) -> int:
    return dist.get_world_size(group=group)


def _all_to_all(x: torch.Tensor, group: Any, scatter_dim: int, gather_dim: int) -> torch.Tensor:
    n = _size(group)
    # all_to_all_single splits dim 0 in equal parts: chunk j goes to rank j, and the chunk from rank i
    # lands at index i, so stacking the chunks on a new dim 0 gives exactly the layout it expects.
    send = torch.stack(x.chunk(n, dim=scatter_dim)).contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    return torch.cat(recv.unbind(0), dim=gather_dim)


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any, scatter_dim: int, gather_dim: int) -> torch.Tensor:
        ctx.group, ctx.scatter_dim, ctx.gather_dim = group, scatter_dim, gather_dim
        return _all_to_all(x, group, scatter_dim, gather_dim)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        # The transpose of an all-to-all is the all-to-all with the two dims swapped.
        return _all_to_all(grad, ctx.group, ctx.gather_dim, ctx.scatter_dim), None, None, None


def all_to_all(x: torch.Tensor, group: Any, scatter_dim: int, gather_dim: int) -> torch.Tensor:
    """Split ``x`` in ``group size`` parts along ``scatter_dim``, send part ``j`` to rank ``j``, and
    concatenate the parts received (in rank order) along ``gather_dim``. Differentiable."""
    if _size(group) == 1:
        return x
    return _AllToAll.apply(x, group, scatter_dim, gather_dim)


class _AllGather(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any, dim: int) -> torch.Tensor:
        ctx.group, ctx.dim = group, dim
        parts = [torch.empty_like(x) for _ in range(_size(group))]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts, dim=dim)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        # Rank j's input gets the sum over ranks of their gradient's part j: a reduce-scatter, which gloo
        # lacks, so an all-to-all of the parts followed by a local sum.
        n = _size(ctx.group)
        send = torch.stack(grad.chunk(n, dim=ctx.dim)).contiguous()
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send, group=ctx.group)
        return recv.sum(0), None, None


def all_gather(x: torch.Tensor, group: Any, dim: int) -> torch.Tensor:
    """Concatenate every rank's ``x`` (rank order) along ``dim``. Differentiable (backward: reduce-scatter)."""
    if _size(group) == 1:
        return x
    return _AllGather.apply(x, group, dim)


def all_gather_nograd(x: torch.Tensor, group: Any, dim: int) -> torch.Tensor:
    """Concatenate every rank's ``x`` along ``dim``, outside autograd (position ids, padding masks)."""
    if _size(group) == 1:
        return x
    parts = [torch.empty_like(x) for _ in range(_size(group))]
    dist.all_gather(parts, x.contiguous(), group=group)
    return torch.cat(parts, dim=dim)


def _shift(x: torch.Tensor, send_to: int, recv_from: int) -> torch.Tensor:
    return exchange(x, send_to, x, recv_from)


class _RingShift(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, ring_ranks: tuple[int, ...], ring_rank: int) -> torch.Tensor:
        n = len(ring_ranks)
        ctx.nxt, ctx.prv = ring_ranks[(ring_rank + 1) % n], ring_ranks[(ring_rank - 1) % n]
        return _shift(x, ctx.nxt, ctx.prv)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        # The gradient travels the ring the other way: back to the rank the tensor came from.
        return _shift(grad, ctx.prv, ctx.nxt), None, None


def ring_shift(x: torch.Tensor, ring_ranks: tuple[int, ...], ring_rank: int) -> torch.Tensor:
    """Send ``x`` to the next rank of the ring and return the previous rank's. Differentiable.

    Args:
        x: this rank's tensor.
        ring_ranks: the ring's global ranks, in ring order.
        ring_rank: this rank's index in ``ring_ranks``.
    """
    if len(ring_ranks) == 1:
        return x
    return _RingShift.apply(x, tuple(ring_ranks), ring_rank)


class _AllReduceSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        out = x.detach().clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM, group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        # Identity, not an all-reduce: every rank backpropagates its own share, and the data-parallel
        # gradient reduction sums the shares; an all-reduce here would count each one ``size`` times.
        return grad, None


def all_reduce_sum(x: torch.Tensor, group: Any) -> torch.Tensor:
    """Sum of ``x`` over the group (every rank gets the value); the gradient reaches only the local ``x``."""
    if _size(group) == 1:
        return x
    return _AllReduceSum.apply(x, group)


def chain_neighbours(sp_rank: int, sp_size: int) -> tuple[int | None, int | None]:
    """Global ranks of the previous and next sequence shard's holders (None at the ends of the sequence).

    An SP group is ``sp_size`` consecutive global ranks, SP-local rank ``i`` holding shard ``i``
    (:mod:`~swiftcore_sequence_parallel.groups`).
    """
    base = dist.get_rank() - sp_rank
    prev = base + sp_rank - 1 if sp_rank > 0 else None
    nxt = base + sp_rank + 1 if sp_rank < sp_size - 1 else None
    return prev, nxt


def exchange(
    send: torch.Tensor | None, send_to: int | None, recv_like: torch.Tensor | None, recv_from: int | None
) -> torch.Tensor | None:
    """Send ``send`` to ``send_to`` and receive a tensor shaped like ``recv_like`` from ``recv_from``, together.

    Either side may be absent (None peer): the ends of a chain only send or only receive. Not differentiable.
    Both are posted together, so no rank blocks in a send while its neighbour waits in a send too.
    """
    ops, out = [], None
    if send is not None and send_to is not None:
        ops.append(dist.P2POp(dist.isend, send.contiguous(), send_to))
    if recv_like is not None and recv_from is not None:
        out = torch.empty_like(recv_like, memory_format=torch.contiguous_format)
        ops.append(dist.P2POp(dist.irecv, out, recv_from))
    if ops:
        for work in dist.batch_isend_irecv(ops):
            work.wait()
    return out


class _ChainShift(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, prev: int | None, nxt: int | None) -> torch.Tensor:
        ctx.prev, ctx.nxt = prev, nxt
        got = exchange(x, nxt, x, prev)
        return torch.zeros_like(x) if got is None else got

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        # Each rank's tensor went to the next rank: its gradient comes back from there (none at the end).
        got = exchange(grad, ctx.prev, grad, ctx.nxt)
        return (torch.zeros_like(grad) if got is None else got), None, None


def chain_shift(x: torch.Tensor, prev: int | None, nxt: int | None) -> torch.Tensor:
    """Send ``x`` to the next shard's rank and return the previous shard's (zeros on the first). Differentiable.

    Unlike :func:`ring_shift` the chain does not wrap around: the last rank's ``x`` goes nowhere (its
    gradient is zero) and the first rank receives zeros.
    """
    if prev is None and nxt is None:
        return torch.zeros_like(x)
    return _ChainShift.apply(x, prev, nxt)
