"""Sequence-parallel process groups and the state the attention functions read.

Layout: the world is cut into sequence-parallel (SP) groups of ``size`` consecutive ranks; inside one
group the SP-local rank ``i`` holds sequence chunk ``i``. In ``hybrid`` mode the group is further cut into
Ulysses sub-groups of ``ulysses_size`` consecutive ranks (so one sub-group holds one contiguous span of the
sequence) and ring sub-groups made of the ranks at the same position of every Ulysses sub-group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from swiftcore_sequence_parallel import MODES

__all__ = [
    "SequenceParallelState",
    "destroy_sequence_parallel",
    "get_sequence_parallel_state",
    "init_sequence_parallel",
    "pick_ulysses_size",
]

RING_IMPLS = ("p2p", "allgather")


@dataclass(frozen=True)
class SequenceParallelState:
    """Where this rank sits in its sequence-parallel group.

    Attributes:
        mode: ``ulysses``, ``ring`` or ``hybrid``.
        size: ranks in the SP group (the number of sequence shards).
        rank: this rank's index in its SP group (= the index of the sequence shard it holds).
        group: the SP group (process group).
        ulysses_size / ulysses_rank / ulysses_group: the all-to-all (head-splitting) sub-group.
        ring_size / ring_rank / ring_group: the sub-group key/value shards travel around.
        ring_ranks: global ranks of ``ring_group`` in ring order (point-to-point ops take global ranks).
        ring_impl: ``p2p`` (true ring pass with send/recv) or ``allgather`` (gather all key/value shards).
    """

    mode: str
    size: int
    rank: int
    group: Any
    ulysses_size: int
    ulysses_rank: int
    ulysses_group: Any
    ring_size: int
    ring_rank: int
    ring_group: Any
    ring_ranks: tuple[int, ...]
    ring_impl: str = "p2p"


_ACTIVE: SequenceParallelState | None = None


def pick_ulysses_size(size: int, num_heads: int, num_kv_heads: int | None = None) -> int:
    """The largest divisor of ``size`` that divides ``num_heads`` (the Ulysses part of a hybrid layout).

    ``num_kv_heads`` is not a constraint: key/value heads that do not split evenly are repeated.
    """
    del num_kv_heads  # kept in the signature so callers can pass the model's config as is
    return max(d for d in range(1, size + 1) if size % d == 0 and num_heads % d == 0)


def init_sequence_parallel(
    size: int,
    mode: str = "ulysses",
    *,
    ulysses_size: int | None = None,
    ring_impl: str = "p2p",
) -> SequenceParallelState:
    """Create the sequence-parallel groups (collective: every rank must call it) and make them active.

    Args:
        size: SP size; must divide the world size (the remaining factor is data parallel).
        mode: one of :data:`~swiftcore_sequence_parallel.MODES` (``both`` is accepted for ``hybrid``).
        ulysses_size: hybrid only: ranks per Ulysses sub-group (must divide ``size``); the ring gets
            ``size // ulysses_size``. Use :func:`pick_ulysses_size` to derive it from the head count.
        ring_impl: ``p2p`` or ``allgather`` (ring and hybrid modes).

    Returns:
        The state, also stored for the attention functions (:func:`get_sequence_parallel_state`).
    """
    import torch.distributed as dist

    global _ACTIVE
    mode = "hybrid" if mode == "both" else mode  # the name for it
    if mode not in MODES:
        raise ValueError(f"unknown sequence-parallel mode {mode!r}; choose one of {', '.join(MODES)}")
    if ring_impl not in RING_IMPLS:
        raise ValueError(f"unknown ring implementation {ring_impl!r}; choose one of {', '.join(RING_IMPLS)}")
    if not dist.is_initialized():
        raise RuntimeError("torch.distributed is not initialised: call torch.distributed.init_process_group first")
    world, me = dist.get_world_size(), dist.get_rank()
    if size < 1 or world % size:
        raise ValueError(f"sequence-parallel size {size} must be >= 1 and divide the world size {world}")
    if mode == "ulysses":
        ulysses_size = size
    elif mode == "ring":
        ulysses_size = 1
    elif ulysses_size is None or ulysses_size < 1 or size % ulysses_size:
        raise ValueError(
            f"hybrid sequence parallel needs ulysses_size dividing the SP size {size} (got {ulysses_size}); "
            "pick_ulysses_size(size, num_heads) gives the largest one the head count allows"
        )
    ring_size = size // ulysses_size

    # One process group per distinct rank list: the ulysses and SP groups coincide in ulysses mode, and a
    # gloo group is not free (each one opens its own connections).
    cache: dict[tuple[int, ...], Any] = {}

    def group_of(ranks: tuple[int, ...]) -> Any:
        # new_group is collective over the whole world: every rank creates every group, in the same order.
        if ranks not in cache:
            cache[ranks] = dist.new_group(list(ranks))
        return cache[ranks]

    mine: dict[str, Any] = {}
    for base in range(0, world, size):
        sp_ranks = tuple(range(base, base + size))
        sp_group = group_of(sp_ranks)
        for g in range(ring_size):
            u_ranks = sp_ranks[g * ulysses_size : (g + 1) * ulysses_size]
            u_group = group_of(u_ranks)
            if me in u_ranks:
                mine["ulysses"] = (u_group, u_ranks.index(me))
        for j in range(ulysses_size):
            r_ranks = sp_ranks[j::ulysses_size]
            r_group = group_of(r_ranks)
            if me in r_ranks:
                mine["ring"] = (r_group, r_ranks.index(me), r_ranks)
        if me in sp_ranks:
            mine["sp"] = (sp_group, sp_ranks.index(me))

    _ACTIVE = SequenceParallelState(
        mode=mode,
        size=size,
        rank=mine["sp"][1],
        group=mine["sp"][0],
        ulysses_size=ulysses_size,
        ulysses_rank=mine["ulysses"][1],
        ulysses_group=mine["ulysses"][0],
        ring_size=ring_size,
        ring_rank=mine["ring"][1],
        ring_group=mine["ring"][0],
        ring_ranks=mine["ring"][2],
        ring_impl=ring_impl,
    )
    return _ACTIVE


def get_sequence_parallel_state() -> SequenceParallelState:
    """The active state (set by :func:`init_sequence_parallel`); RuntimeError when there is none."""
    if _ACTIVE is None:
        raise RuntimeError("sequence parallelism is not initialised: call init_sequence_parallel(size, mode) first")
    return _ACTIVE


def destroy_sequence_parallel() -> None:
    """Forget the active state (the process groups die with the default group)."""
    global _ACTIVE
    _ACTIVE = None
