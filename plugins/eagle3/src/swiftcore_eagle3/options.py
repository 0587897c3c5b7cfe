"""The ``eagle3`` recipe's own options, checked before anything is loaded."""

from __future__ import annotations

from dataclasses import dataclass

from swiftcore.api import SwiftcoreError

__all__ = ["Eagle3Options", "default_aux_layers"]


@dataclass
class Eagle3Options:
    """``swiftcore train --recipe eagle3``'s own options.

    Attributes:
        draft_layers (`int`, defaults to 1): decoder layers of the draft head.
        ttt_steps (`int`, defaults to 3): training-time-test steps (tokens predicted ahead during training), and the
            speculative tokens per verification the saved config proposes.
        aux_layers (`str`, *optional*): comma-separated indices of the target hidden states the draft reads; None
            for :func:`default_aux_layers`.
        draft_vocab_size (`int`, *optional*): the draft's vocabulary, the most frequent trained tokens of the
            dataset (speculators' ``draft_vocab_size`` with its ``d2t`` / ``t2d`` mappings); None for the target's.
        hidden_states_cache (`str`, *optional*): a directory where the target's hidden states are computed once and
            kept (:mod:`swiftcore_eagle3.hidden_cache`), read by every step and by later runs; None to run the
            target at every step.
    """

    draft_layers: int = 1
    ttt_steps: int = 3
    aux_layers: str | None = None
    draft_vocab_size: int | None = None
    hidden_states_cache: str | None = None

    def __post_init__(self) -> None:
        if self.draft_layers < 1:
            raise SwiftcoreError(f"--draft-layers {self.draft_layers}: give at least 1")
        if self.ttt_steps < 1:
            raise SwiftcoreError(f"--ttt-steps {self.ttt_steps}: give at least 1")
        if self.draft_vocab_size is not None and self.draft_vocab_size < 1:
            raise SwiftcoreError(
                f"--draft-vocab-size {self.draft_vocab_size}: give at least 1 (or leave it out for the target's "
                "vocabulary)"
            )
        self.aux_layer_ids()  # a malformed list fails now, before the target loads

    def aux_layer_ids(self) -> list[int] | None:
        """``--aux-layers`` as a list of ints, or None when not given."""
        if self.aux_layers is None:
            return None
        try:
            ids = [int(part) for part in str(self.aux_layers).split(",") if part.strip()]
        except ValueError:
            raise SwiftcoreError(
                f"--aux-layers {self.aux_layers!r}: give comma-separated layer indices, e.g. 2,16,29"
            ) from None
        if not ids or len(set(ids)) != len(ids) or min(ids) < 0:
            raise SwiftcoreError(f"--aux-layers {self.aux_layers!r}: give distinct non-negative layer indices")
        return ids


def default_aux_layers(num_layers: int) -> list[int]:
    """The target hidden states an Eagle3 draft reads by default: ``[2, N // 2, N - 3]`` (speculators' and vLLM's
    default) for ``N`` layers, or ``[1, N // 2, N - 1]`` for fewer than 6 layers, where those collide.

    Raises:
        SwiftcoreError: the target has fewer than 3 layers (name them with ``--aux-layers``).
    """
    if num_layers >= 6:
        return [2, num_layers // 2, num_layers - 3]
    ids = sorted({1, num_layers // 2, num_layers - 1})
    if len(ids) < 3 or min(ids) < 1:
        raise SwiftcoreError(
            f"the target has {num_layers} layers: too few for the default three hidden states; name them with "
            "--aux-layers (indices 0 to N)"
        )
    return ids
