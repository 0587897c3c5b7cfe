"""The parallel layout of a megatron run (``--tp``, ``--pp``, ``--vpp``, ``--ep``, ``--cp`` and the launcher's world
size), checked against the model before any process group is created, so a layout that cannot work fails in a
second."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from swiftcore.api import SwiftcoreError

__all__ = ["ParallelLayout", "world_size"]


def world_size() -> int:
    """The number of processes the launcher started (``WORLD_SIZE`` under torchrun; 1 without a launcher)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


@dataclass(frozen=True)
class ParallelLayout:
    """How the ranks split the model: ``tp`` x ``pp`` x ``cp`` model-parallel groups, ``dp`` data-parallel replicas of
    them, the experts of MoE layers split ``ep`` ways across the data-parallel ranks (megatron-core's layout).
    ``vpp`` model chunks per pipeline rank (megatron's interleaved 1F1B) take no ranks of their own; ``cp`` splits
    every sequence over its ranks (context parallelism, :mod:`swiftcore_train_megatron.cp`).

    Raises:
        ValueError: (in ``__post_init__``) a size below 1.
    """

    tp: int = 1
    pp: int = 1
    ep: int = 1
    vpp: int = 1
    cp: int = 1

    def __post_init__(self) -> None:
        sizes = (("tp", self.tp), ("pp", self.pp), ("ep", self.ep), ("vpp", self.vpp), ("cp", self.cp))
        bad = [f"--{n} {v!r}" for n, v in sizes if int(v) < 1]
        if bad:
            raise ValueError(f"{', '.join(bad)}: parallel sizes must be at least 1")

    def data_parallel(self, world: int) -> int:
        """Data-parallel replicas at ``world`` processes."""
        return world // (self.tp * self.pp * self.cp)

    def record(self, world: int, bridge_name: str) -> dict[str, Any]:
        """The ``engine`` entry of the run's ``args.json``: this layout, the world size and the bridge, written the
        same way by every recipe on the engine (SFT, DPO, KTO, RM, GRPO, GKD)."""
        return {
            "name": "megatron",
            "tp": self.tp,
            "pp": self.pp,
            "vpp": self.vpp,
            "ep": self.ep,
            "cp": self.cp,
            "world_size": world,
            "bridge": bridge_name,
        }

    def check(self, bridge: Any, bridge_spec: Any, world: int, *, micro_batches: int = 0) -> None:
        """Refuse a layout that does not fit the launch or the model, naming what would.

        Args:
            bridge: the family's :class:`~swiftcore_megatron.MegatronBridge` for the checkpoint.
            bridge_spec: its :class:`~swiftcore.specs.BridgeSpec` (which parallelism it supports).
            world: the number of processes launched.
            micro_batches: micro-batches per optimiser step (``--gradient-accumulation-steps``; 0: not checked),
                which megatron's interleaved schedule needs in multiples of ``--pp``.

        Raises:
            SwiftcoreError: a world size that is no multiple of the model-parallel size, pipeline or expert
                parallelism the bridge or the data-parallel size cannot give, sizes that do not divide the
                layers, heads, kv heads, MLP width, vocabulary or experts, ``--vpp`` without ``--pp``, or ``--cp``
                where megatron-core's context-parallel attention cannot run.
        """
        from swiftcore_megatron import ParallelismError

        if self.vpp > 1 and self.pp == 1:
            raise SwiftcoreError(
                f"--vpp {self.vpp}: virtual pipeline stages interleave the chunks of a pipeline, and this run has none "
                "(--pp 1); add --pp 2 (or more) with --vpp, or drop --vpp"
            )
        if self.pp > 1:
            self._check_pipeline(bridge, bridge_spec)
        if self.vpp > 1 and micro_batches % self.pp:
            raise SwiftcoreError(
                f"--vpp {self.vpp} --pp {self.pp}: megatron's interleaved schedule runs the micro-batches of a step in "
                f"groups of --pp; --gradient-accumulation-steps {micro_batches} is no multiple of {self.pp}: use "
                f"--gradient-accumulation-steps {self.pp} (or a multiple of it)"
            )
        if self.cp > 1:
            from swiftcore_train_megatron.cp import check_context_parallel

            check_context_parallel(self.cp)
        model_parallel = self.tp * self.pp * self.cp
        if world % model_parallel:
            sizes = f"--tp {self.tp} x --pp {self.pp}" + (f" x --cp {self.cp}" if self.cp > 1 else "")
            raise SwiftcoreError(
                f"world size {world} (processes launched) is not a multiple of {sizes} = "
                f"{model_parallel}: launch with torchrun --nproc-per-node {model_parallel} (or a multiple of it)"
            )
        if self.ep > 1 and "ep" not in bridge_spec.parallelism:
            raise SwiftcoreError(
                f"--ep {self.ep}: bridge {bridge_spec.name!r} does not support expert parallelism; use --ep 1"
            )
        dp = self.data_parallel(world)
        if dp % self.ep:
            raise SwiftcoreError(
                f"--ep {self.ep} does not divide the {dp} data-parallel rank(s) of this launch (world {world} / "
                f"--tp {self.tp}): experts are split across data-parallel ranks; launch "
                f"torchrun --nproc-per-node {model_parallel * self.ep} for --ep {self.ep}"
            )
        try:
            bridge.validate_parallelism(self.tp, self.ep)
        except ParallelismError as exc:
            raise SwiftcoreError(str(exc)) from exc

    def _check_pipeline(self, bridge: Any, bridge_spec: Any) -> None:
        """Refuse ``--pp`` for a bridge that does not build pipeline stages, a layer count it does not divide, and
        multi-token-prediction layers (not split into stages yet)."""
        from swiftcore_megatron import stages

        if "pp" not in bridge_spec.parallelism:
            raise SwiftcoreError(
                f"--pp {self.pp}: bridge {bridge_spec.name!r} does not build pipeline stages; use --pp 1 (and --tp"
                + (" / --ep" if "ep" in bridge_spec.parallelism else "")
                + " to split the model)"
            )
        if any(rule.mcore.startswith("mtp.") for rule in bridge.rules()):
            raise SwiftcoreError(
                f"--pp {self.pp}: this checkpoint has multi-token-prediction layers, which the megatron engine does "
                "not split into pipeline stages yet; use --pp 1"
            )
        layers = stages(bridge, 1)[0].num_layers
        if layers % self.pp:
            usable = [d for d in range(1, layers + 1) if layers % d == 0]
            raise SwiftcoreError(
                f"--pp {self.pp} does not divide the model's {layers} decoder layers (every stage holds as many); "
                f"use one of {usable}"
            )
        if layers % (self.pp * self.vpp):
            usable = [d for d in range(1, layers // self.pp + 1) if layers % (self.pp * d) == 0]
            raise SwiftcoreError(
                f"--pp {self.pp} x --vpp {self.vpp} = {self.pp * self.vpp} model chunks do not divide the model's "
                f"{layers} decoder layers (every chunk holds as many); with --pp {self.pp} use --vpp one of {usable}"
            )
