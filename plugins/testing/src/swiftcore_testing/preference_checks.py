"""The held-out measure of the preference tests: how often a model prefers the chosen reply of a pair.

Used by swiftcore-recipe-preference's learning tests and swiftcore-train-megatron's preference-recipe tests, so the
two engines are judged by one definition.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["pairwise_accuracy"]


def pairwise_accuracy(model: Any, pairs: Sequence[Mapping[str, Any]]) -> float:
    """Share of ``pairs`` (encoded: ``prompt_ids``, ``chosen_ids``, ``rejected_ids``) whose chosen reply has the
    higher summed log-probability under ``model`` (a causal LM, one unpadded sequence at a time, no gradient)."""
    import torch

    def logp(prompt: list[int], reply: list[int]) -> float:
        ids = torch.tensor([list(prompt) + list(reply)])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, :-1].float()
        return float(logits.log_softmax(-1).gather(-1, ids[0, 1:, None])[len(prompt) - 1 :].sum())

    wins = [logp(p["prompt_ids"], p["chosen_ids"]) > logp(p["prompt_ids"], p["rejected_ids"]) for p in pairs]
    return sum(wins) / len(wins)
