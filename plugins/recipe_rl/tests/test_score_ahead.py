"""Rewards scored ahead (``--async-rollouts``): each round's early scores are kept under the round, so with
``--max-staleness K >= 2`` (two rounds generated and scored before TRL asks for the first) neither is overwritten
before use: each round is scored once, and TRL's call gets that round's own scores."""

from __future__ import annotations

from typing import Any


class _Codec:
    """Decodes ids as their numbers joined by spaces (the reward below reads them back)."""

    def decode(self, ids: list[int]) -> str:
        return " ".join(str(int(t)) for t in ids)


def _counting_reward() -> tuple[Any, list[list[str]]]:
    """A core :class:`~swiftcore_train.Reward` scoring a completion by the sum of its ids, recording each call."""
    from swiftcore_train import Reward

    from swiftcore.api import RewardSpec

    calls: list[list[str]] = []

    def total(completions: list[str], **kwargs: Any) -> list[float]:
        calls.append(list(completions))
        return [float(sum(int(t) for t in text.split())) for text in completions]

    return Reward(spec=RewardSpec(name="total", function="a.b:c"), function=total), calls


def test_rounds_scored_ahead_are_kept_per_round() -> None:
    from swiftcore_recipe_rl.rewards import TRLReward

    reward, calls = _counting_reward()
    trl = TRLReward(reward, _Codec())
    rounds = [(["p", "q"], [[1, 2], [3]]), (["p", "q"], [[4], [5, 6]]), (["r", "s"], [[7], [8]])]
    for prompts, ids in rounds[:2]:  # K = 2: two rounds scored on the worker before TRL asks for the first
        trl.score_ahead(prompts, ids)
    assert trl.score(rounds[0][0], [], rounds[0][1]) == [3.0, 3.0]
    trl.score_ahead(*rounds[2])  # the next round, scored while round 1 is trained
    assert trl.score(rounds[1][0], [], rounds[1][1]) == [4.0, 11.0]
    assert trl.score(rounds[2][0], [], rounds[2][1]) == [7.0, 8.0]
    assert len(calls) == 3, calls  # each round scored once, ahead; none again when TRL asked for it
    # A round never scored ahead is scored when asked for; one scored ahead but dropped by the schedule (too stale,
    # generated again) is discarded once a later round is asked for, and never handed to another round.
    trl.score_ahead(["x"], [[9]])
    trl.score_ahead(["y"], [[10]])
    assert trl.score(["y"], [], [[10]]) == [10.0]
    assert trl.score(["x"], [], [[9]]) == [9.0] and len(calls) == 6, calls
    assert trl._ahead == []
