"""Hook implementations of swiftcore-sequence-parallel: the ``--sequence-parallel-size`` options (sft, heads) and
swiftcore-train's training hooks, through which a run with SP above 1 is checked and switched to SP.

Plain data only: torch and transformers are imported by :mod:`~swiftcore_sequence_parallel.training` when a
run actually asks for sequence parallelism (``swiftcore train --help`` stays fast).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from swiftcore.api import hookimpl
from swiftcore_sequence_parallel import HEAD_RECIPES

SWIFTCORE_API = "1.5"  # the plugin API this module was written against: swiftcore_addhooks came in 1.5

#: The recipes these options belong to (``swiftcore train --recipe NAME``): sft and swiftcore-heads' recipes.
RECIPES = ("sft", *HEAD_RECIPES)
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


def _requested(options: Mapping[str, Any]) -> bool:
    """Whether the run asks for sequence parallelism (``--sequence-parallel-size`` above 1); the hooks below are
    called for every run, SP or not."""
    return int(options.get("sequence_parallel_size") or 1) > 1


@hookimpl
def swiftcore_train_check(options: Mapping[str, Any], model_dir: str) -> None:
    """Refuse from ``config.json`` and the world size what SP cannot train exactly, before the model loads."""
    if _requested(options):
        from swiftcore_sequence_parallel.training import check_before_load

        check_before_load(model_dir, options)


@hookimpl
def swiftcore_train_setup(setup: Any) -> None:
    """Check the loaded model, create the SP groups, and switch the run's trainer and collator to SP."""
    if _requested(setup.options):
        from swiftcore_sequence_parallel.training import apply_sequence_parallel

        apply_sequence_parallel(setup)
