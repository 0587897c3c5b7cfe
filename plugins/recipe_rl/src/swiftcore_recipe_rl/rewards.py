"""The run's rewards as TRL reward functions: decoded by the template, scored safely by the core's :class:`Reward`.

TRL calls each reward function with ``prompts``, ``completions``, ``completion_ids`` and every dataset column; the
adapter adds ``records`` (each prompt's chat record, so a reward can render the conversation with its reply: the
row's messages, tools and own ``chat_template_kwargs``, without the run's ``--enable-thinking/--disable-thinking``
default, which is the policy's; a reward rendering for a model of its own applies that model's defaults).
The adapter decodes the completion ids itself (:meth:`~swiftcore_recipe_rl.rollout.PromptCodec.decode`: the
text a served reply would have) and hands the reward the columns, so a reward sees the same text in training
as in serving. Faults are the core's to absorb (``swiftcore_train.rewards.Reward``): the fallback reward and a
logged error, never a failed step; the count is logged as ``reward_faults/NAME``.

With ``--environment`` the completion a reward scores is the episode's last reply, and the episode comes by keyword
(``messages``, ``tool_calls``, ``turns``, ``env_reward``:
:data:`~swiftcore_recipe_rl.environment_reward.EPISODE_KEYWORDS`); ``completion_ids`` are then the whole episode's
(replies and tool results). ``messages`` is to ``records`` what the episode is to its prompt: the prompt record's
messages, then every reply as the template parsed it (its ``tool_calls`` and ``reasoning_content``) and every tool
message, ending with the last reply; a reward that renders the conversation renders those messages with the
record's ``tools`` and ``chat_template_kwargs`` (the ``reward_model`` does). Single-turn runs pass no ``messages`` (a
dataset's ``messages`` is the prompt, never a column).

The adapter is an ``async`` callable that runs the reward on a worker thread, so TRL (which gathers async reward
functions with ``asyncio.gather``) runs the run's rewards concurrently with each other: a reward waiting on a
remote model or a sandbox does not hold up the others. With ``--async-rollouts`` a round's rewards are scored on the
rollout worker as soon as its rollouts are generated (:meth:`TRLReward.score_ahead`), overlapping the training of
the step before; TRL's call for that round then gets the kept scores. Each round's scores are kept under the round
(its prompts and completion ids), so with ``--max-staleness K >= 2`` the rounds scored ahead do not overwrite each
other before TRL asks for them.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

__all__ = ["TRLReward"]

#: Keywords TRL adds for its own reward functions; swiftcore rewards do not see them.
_TRL_ONLY = ("trainer_state", "log_extra", "log_metric", "environments", "final_completion")


class TRLReward:
    """One swiftcore reward, callable as TRL's ``reward_func(prompts, completions, completion_ids, **kwargs)``.

    Args:
        reward: the loaded reward (:func:`swiftcore_train.rewards.load_rewards`).
        codec: decodes completion ids to text.
        records: prompt text -> the prompt's chat record; passed to the reward as ``records`` (one per completion).
    """

    def __init__(self, reward: Any, codec: Any, records: dict[str, dict] | None = None) -> None:
        self.reward = reward
        self.codec = codec
        self.records = records or {}
        self.__name__ = reward.name  # TRL logs rewards/<__name__>/mean
        # The rounds scored ahead and not yet asked for, oldest first: (round key, scores, faults). Written by the
        # rollout worker, read by TRL's thread.
        self._ahead: list[tuple[Any, list[float], int]] = []
        self._ahead_lock = threading.Lock()

    async def __call__(
        self, prompts: list[Any], completions: list[Any], completion_ids: list[list[int]], **kwargs: Any
    ) -> list[float]:
        """One score per completion, computed on a worker thread (never raises; faults cost the fallback)."""
        return await asyncio.to_thread(self.score, prompts, completions, completion_ids, **kwargs)

    def score(
        self, prompts: list[Any], completions: list[Any], completion_ids: list[list[int]], **kwargs: Any
    ) -> list[float]:
        """The synchronous scoring :meth:`__call__` runs (TRL's ``completions`` are ignored: see the module); the
        scores :meth:`score_ahead` kept for these prompts and ids when there are some."""
        ahead = self._take_ahead(_key(prompts, completion_ids)) if kwargs.get("final_completion") is None else None
        if ahead is not None:
            scores, faults = ahead
        else:
            scores, faults = self._score(prompts, completion_ids, kwargs)
        log_metric = kwargs.get("log_metric")
        if callable(log_metric):
            log_metric(f"reward_faults/{self.reward.name}", float(faults))
        return scores

    def score_ahead(self, prompts: list[Any], completion_ids: list[list[int]], **columns: Any) -> None:
        """Score a round before TRL asks for it (async rollouts, on the rollout worker) and keep the scores for
        TRL's call with the same prompts and completion ids."""
        scores, faults = self._score(prompts, completion_ids, columns)
        with self._ahead_lock:
            self._ahead.append((_key(prompts, completion_ids), scores, faults))

    def _take_ahead(self, key: tuple) -> tuple[list[float], int] | None:
        """The scores kept for the round ``key`` (the oldest such round), or None. Rounds kept before it are dropped:
        TRL asks for rounds in the order they were generated, so an older one was dropped by the schedule (too stale,
        generated again) and will not be asked for."""
        with self._ahead_lock:
            at = next((i for i, (k, _, _) in enumerate(self._ahead) if k == key), None)
            if at is None:
                return None
            _, scores, faults = self._ahead[at]
            del self._ahead[: at + 1]
            return scores, faults

    def _score(self, prompts: list[Any], completion_ids: list[list[int]], kwargs: dict[str, Any]) -> tuple[list, int]:
        """``(scores, faults)``: the reward's scores (never raises) and how many of them were fallbacks."""
        finals = kwargs.get("final_completion")  # a multi-turn episode: the reward scores its last reply
        texts = list(finals) if finals is not None else [self.codec.decode(ids) for ids in completion_ids]
        columns = {k: v for k, v in kwargs.items() if k not in _TRL_ONLY}
        before = self.reward.faults
        if self.records:  # the prompt's chat record, for rewards that render the conversation (reward_model)
            columns.setdefault("records", [self.records.get(p) for p in prompts])
        scores = self.reward(texts, prompts=list(prompts), completion_ids=[list(i) for i in completion_ids], **columns)
        return scores, self.reward.faults - before


def _key(prompts: list[Any], completion_ids: list[list[int]]) -> tuple:
    """What identifies a round's samples: its prompts and completion ids, in order."""
    return tuple(prompts), tuple(tuple(int(t) for t in ids) for ids in completion_ids)
