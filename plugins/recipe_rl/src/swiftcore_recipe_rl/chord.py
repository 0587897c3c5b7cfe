"""CHORD: GRPO's loss mixed with supervised fine-tuning on expert data, ``L = (1 - mu) L_GRPO + mu L_SFT``.

CHORD (Zhang et al., "On-Policy RL Meets Off-Policy Experts: Harmonizing Supervised Fine-Tuning and Reinforcement
Learning via Dynamic Weighting", arXiv:2508.11408) adds the cross-entropy of expert replies to the RL loss, with a
global weight ``mu`` that warms up and then decays (:func:`mu_schedule`), and optionally CHORD-phi: each expert
token's loss weighted by ``phi = p (1 - p)``, ``p`` the policy's probability of that token, so tokens the policy
already predicts (``p ~ 1``) or finds far off-policy (``p ~ 0``) pull less (:func:`sft_loss`).

Sources checked: ms-swift's ``swift/trainers/rlhf_trainer/utils.py`` (``mu_schedule_function``,
``compute_chord_loss``; flags ``--chord_mu_warmup_steps``, ``--chord_mu_decay_steps``, ``--chord_mu_peak``,
``--chord_mu_valley``, ``--chord_enable_phi_function``, ``--chord_sft_per_device_train_batch_size``) and Trinity-RFT's
``trinity/algorithm/policy_loss_fn/chord_policy_loss.py`` (the paper authors' code: the same schedule; ``phi``
detached, so it weights the gradient of ``-log p`` and is not itself differentiated, which is what this module does;
ms-swift differentiates through ``phi`` as well).

The expert data is swiftcore chat data (``messages``), encoded by the run's template exactly as ``--recipe sft``
encodes it (:func:`swiftcore_train.encode_records`: loss policy, ``--max-length``, truncation and thinking mode are
the run's), then batched by :class:`ExpertBatches`.

Importing this module imports neither torch nor TRL.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

__all__ = ["ExpertBatches", "encode_expert_data", "mu_schedule", "sft_loss"]


def mu_schedule(step: int, *, warmup_steps: int, decay_steps: int, peak: float, valley: float) -> float:
    """CHORD's weight of the SFT term at optimiser step ``step`` (ms-swift's and Trinity-RFT's
    ``mu_schedule_function``).

    - ``step < warmup_steps``: linear from 0 to ``peak``, ``peak * step / warmup_steps``;
    - then cosine decay: ``valley + (peak - valley) * (1 + cos(pi * (step - warmup_steps) / decay_steps)) / 2``;
    - ``step >= warmup_steps + decay_steps``: ``valley``.
    """
    if step < warmup_steps:
        return peak * step / warmup_steps
    if step >= warmup_steps + decay_steps:
        return valley
    progress = (step - warmup_steps) / decay_steps
    return valley + (peak - valley) * 0.5 * (1.0 + math.cos(math.pi * progress))


def sft_loss(logps: Any, mask: Any, *, phi: bool = False) -> Any:
    """The token-mean cross-entropy of the expert labels from each label's log-probability ``logps`` (``mask``: where
    there is a label), as :func:`swiftcore_train.label_logps` gives them (chunked: the full logits never exist).

    With ``phi`` (CHORD-phi), each token's ``-log p`` is weighted by ``p (1 - p)``, ``p`` detached (the
    paper authors' Trinity-RFT code); the mean still divides by the number of label tokens.

    Args:
        logps: ``(B, T - 1)`` float32 log-probabilities of the labels (causal: the logits at ``t`` score ``t + 1``).
        mask: ``(B, T - 1)`` where there is a label.
        phi: weight each token by ``p (1 - p)``.
    """
    per_token = -logps
    if phi:
        p = logps.detach().exp()
        per_token = per_token * p * (1.0 - p)
    return (per_token * mask).sum() / mask.sum().clamp(min=1)


def encode_expert_data(path: str, template: Any, tokenizer: Any, cfg: Any) -> list[dict[str, list[int]]]:
    """``--chord-dataset PATH``: its rows read as SFT reads a ``--dataset`` (:func:`swiftcore_data.load_records`,
    every row checked) and encoded as SFT encodes them (:func:`swiftcore_train.encode_records`); one
    ``{"input_ids", "labels"}`` per row.

    Raises:
        SwiftcoreError: the data cannot be read or encoded, naming ``--chord-dataset``.
    """
    from swiftcore_data import load_records, parse_dataset_arg
    from swiftcore_train import encode_records

    from swiftcore.api import SwiftcoreError

    try:
        records = list(load_records([parse_dataset_arg(path)], seed=cfg.seed, skip_bad_rows=cfg.skip_bad_rows))
        samples = encode_records(records, template, tokenizer, cfg, desc="--chord-dataset")
    except SwiftcoreError as exc:  # swiftcore_data's DataError included
        raise SwiftcoreError(f"--chord-dataset {path}: {exc}") from exc
    if any(set(sample) - {"input_ids", "labels"} for sample in samples):
        raise SwiftcoreError(f"--chord-dataset {path}: images or audio are not supported yet (text chat data only)")
    return [{"input_ids": list(s["input_ids"]), "labels": list(s["labels"])} for s in samples]


class ExpertBatches:
    """The expert samples cycled in batches: each pass over them is a new shuffle (``seed``); process ``rank`` of
    ``world`` takes every ``world``-th batch, so data-parallel processes train on different expert rows.

    The cursor is not checkpointed: a resumed run starts a fresh pass (the data is sampled, not epoch-counted).
    """

    def __init__(
        self, samples: Sequence[dict[str, list[int]]], batch_size: int, pad_id: int, *, seed: int = 0,
        rank: int = 0, world: int = 1,
    ) -> None:  # fmt: skip
        if not samples:
            raise ValueError("ExpertBatches: no expert samples")
        self.samples, self.batch_size, self.pad_id = list(samples), int(batch_size), int(pad_id)
        self.rank, self.world = rank, world
        self._rng = random.Random(seed)
        self._order: list[int] = []

    def _take(self) -> int:
        if not self._order:
            self._order = list(range(len(self.samples)))
            self._rng.shuffle(self._order)
        return self._order.pop()

    def next_rows(self) -> list[dict[str, list[int]]]:
        """This process's next batch of samples (the other processes' batches skipped)."""
        rows = []
        for index in range(self.batch_size * self.world):
            row = self.samples[self._take()]
            if index // self.batch_size == self.rank:
                rows.append(row)
        return rows

    def collate(self, rows: Sequence[dict[str, list[int]]], device: Any = None) -> dict[str, Any]:
        """``input_ids``, ``attention_mask`` and ``labels`` tensors, padded on the right (labels with ``-100``)."""
        import torch

        width = max(len(r["input_ids"]) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        labels = torch.full((len(rows), width), -100, dtype=torch.long)
        attention = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            n = len(row["input_ids"])
            ids[i, :n] = torch.tensor(row["input_ids"])
            labels[i, :n] = torch.tensor(row["labels"])
            attention[i, :n] = 1
        return {"input_ids": ids.to(device), "attention_mask": attention.to(device), "labels": labels.to(device)}

    def next_batch(self, device: Any = None) -> dict[str, Any]:
        """:meth:`next_rows`, collated on ``device``."""
        return self.collate(self.next_rows(), device)
