"""DAPO's dynamic sampling with refill (Yu et al., 2025, arXiv:2503.14476, Algorithm 1, lines 6-8): the pieces the
``grpo`` trainer uses to keep sampling until its batch holds only groups with a signal.

DAPO samples a batch of prompts, drops the groups whose rewards are all equal (every member's advantage is 0), and
samples more prompts until the batch has as many informative groups as it should, ``0 < |{o_i correct}| < G`` for
each. The trainer (``--dynamic-sampling --dapo-max-resample N``) runs up to ``N`` extra generation rounds of the
same size, each on prompts drawn from the training set (:func:`resample_indices`), and assembles the batch from the
rounds' informative groups, first found first taken (:func:`select_rollouts`). Importing this module imports no
torch: the functions take tensors and use their methods.
"""

from __future__ import annotations

import random
from typing import Any

from swiftcore.api import SwiftcoreError

__all__ = ["pick_groups", "resample_indices", "select_rollouts"]

#: Rollout columns TRL left-pads (the prompt side); every other ``(B, T)`` column is right-padded.
_LEFT_PADDED = ("prompt_ids", "prompt_mask")
#: Rollout columns rebuilt after the selection, not selected.
_RECOMPUTED = ("num_items_in_batch",)


def resample_indices(dataset_size: int, count: int, *, seed: int, step: int, round_: int) -> list[int]:
    """``count`` row indices of a dataset of ``dataset_size`` rows for refill round ``round_`` of optimiser step
    ``step``: distinct while the dataset has enough rows, reproducible for a given ``seed``."""
    rng = random.Random(f"dapo-resample:{seed}:{step}:{round_}")
    if count <= dataset_size:
        return rng.sample(range(dataset_size), count)
    return rng.choices(range(dataset_size), k=count)


def pick_groups(keeps: list[list[bool]], groups: int) -> list[tuple[int, int, bool]]:
    """``(round, group, informative)`` of the ``groups`` groups a refilled batch is made of.

    ``keeps[r][g]`` says whether group ``g`` of round ``r`` is informative. The informative groups come first, in
    the order they were sampled; when the rounds found fewer than ``groups``, the first round's other groups fill
    the rest (the trainer masks them out of the loss, as the filter form does).
    """
    informative = [(r, g, True) for r, keep in enumerate(keeps) for g, k in enumerate(keep) if k][:groups]
    if len(informative) < groups:
        filler = [(0, g, False) for g, k in enumerate(keeps[0]) if not k]
        informative += filler[: groups - len(informative)]
    return informative


def select_rollouts(parts: list[dict[str, Any]], rows: list[tuple[int, int]], pad_id: int) -> dict[str, Any]:
    """One rollout batch of TRL's ``_generate_and_score_completions`` layout made of ``rows`` (``(part, row)``) of
    several: each column's rows stacked, the prompt side left-padded and the completion side right-padded to the
    widest (``pad_id`` for token ids, 0 elsewhere). ``num_items_in_batch`` is left for the caller to recompute.

    Raises:
        SwiftcoreError: a column this refill cannot stack (images, audio: their tensors are not one row per sample).
    """
    import torch

    out: dict[str, Any] = {}
    for key, first in parts[0].items():
        if key in _RECOMPUTED:
            continue
        if not (isinstance(first, torch.Tensor) and first.dim() in (1, 2) and first.size(0) == len(_rows(parts[0]))):
            raise SwiftcoreError(
                f"--dapo-max-resample: the rollouts carry {key!r}, which the refill cannot regroup (media inputs are "
                "not supported yet); use --dapo-max-resample 0 (the filter form)"
            )
        picked = [parts[p][key][i] for p, i in rows]
        if first.dim() == 1:
            out[key] = torch.stack(picked)
            continue
        width = max(t.size(0) for t in picked)
        value = pad_id if key in ("prompt_ids", "completion_ids") else 0
        left = key in _LEFT_PADDED
        padded = []
        for t in picked:
            pad = t.new_full((width - t.size(0),), value)
            padded.append(torch.cat([pad, t] if left else [t, pad]))
        out[key] = torch.stack(padded)
    return out


def _rows(part: dict[str, Any]) -> Any:
    return part["completion_ids"]
