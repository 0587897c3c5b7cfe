"""The parallel layout of a megatron run (``--tp``, ``--pp``, ``--ep`` and the launcher's world size), checked
against the model before any process group is created, so a layout that cannot work fails in a second."""

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
    """How the ranks split the model: ``tp`` x ``pp`` model-parallel groups, ``dp`` data-parallel replicas of them,
    the experts of MoE layers split ``ep`` ways across the data-parallel ranks (megatron-core's layout).

    Raises:
        ValueError: (in ``__post_init__``) a size below 1.
    """

    tp: int = 1
    pp: int = 1
    ep: int = 1

    def __post_init__(self) -> None:
        bad = [f"--{n} {v!r}" for n, v in (("tp", self.tp), ("pp", self.pp), ("ep", self.ep)) if int(v) < 1]
        if bad:
            raise ValueError(f"{', '.join(bad)}: parallel sizes must be at least 1")

    def data_parallel(self, world: int) -> int:
        """Data-parallel replicas at ``world`` processes."""
        return world // (self.tp * self.pp)

    def check(self, bridge: Any, bridge_spec: Any, world: int) -> None:
        """Refuse a layout that does not fit the launch or the model, naming what would.

        Args:
            bridge: the family's :class:`~swiftcore_megatron.MegatronBridge` for the checkpoint.
            bridge_spec: its :class:`~swiftcore.specs.BridgeSpec` (which parallelism it supports).
            world: the number of processes launched.

        Raises:
            SwiftcoreError: a world size that is no multiple of the model-parallel size, pipeline or expert
                parallelism the bridge or the data-parallel size cannot give, or sizes that do not divide the
                layers, heads, kv heads, MLP width, vocabulary or experts.
        """
        from swiftcore_megatron import ParallelismError

        if self.pp > 1:
            self._check_pipeline(bridge, bridge_spec)
        model_parallel = self.tp * self.pp
        if world % model_parallel:
            raise SwiftcoreError(
                f"world size {world} (processes launched) is not a multiple of --tp {self.tp} x --pp {self.pp} = "
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
