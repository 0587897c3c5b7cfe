"""Hook implementations of swiftcore-sequence-parallel: the ``--sequence-parallel-size`` options (sft, heads).

Plain data only: torch and transformers are imported by :mod:`~swiftcore_sequence_parallel.training` when a
run actually asks for sequence parallelism (``swiftcore train --help`` stays fast).
"""

from __future__ import annotations

from typing import Any

from swiftcore.api import API_VERSION_STRING, hookimpl

SWIFTCORE_API = API_VERSION_STRING

#: The recipes these options belong to (``swiftcore train --recipe NAME``): sft and swiftcore-heads' recipes.
RECIPES = ("sft", "classification", "embedding", "reranker", "generative_reranker")
#: ``--sp-mode`` values; ``both`` (alias ``hybrid``) is Ulysses inside groups, ring across them.
CLI_MODES = ("ulysses", "ring", "both", "hybrid")


@hookimpl
def swiftcore_addoption(parser: Any) -> None:
    """``--sequence-parallel-size``, ``--sp-mode``, ``--sp-ring-impl``: split each sequence over ranks (sft, heads)."""
    import click  # the CLI's own dependency, cheap; only for the choice lists

    group = parser.getgroup(
        "sequence-parallel", "sequence parallelism (one sequence split over ranks; under torchrun)", recipe=RECIPES
    )
    group.addoption(
        "--sequence-parallel-size",
        type=int,
        default=1,
        help="Split every training sequence into N contiguous shards, one per rank, with exact attention over the "
        "whole sequence (run under torchrun; N divides the world size, the remaining factor is data parallel). "
        "1 (default) turns it off.",
    )
    group.addoption(
        "--sp-mode",
        type=click.Choice(CLI_MODES),
        default="ulysses",
        help="ulysses: all-to-all over attention heads (N divides the head count); ring: key/value shards passed "
        "around the ranks (any N); both: Ulysses inside groups, ring across them.",
    )
    group.addoption(
        "--sp-ring-impl",
        type=click.Choice(("p2p", "allgather")),
        default="p2p",
        help="Ring modes: p2p (send/recv around the ring) or allgather (one gather of all key/value shards).",
    )
