"""Reward shaping the GRPO recipe adds to the run's ``--reward`` functions.

DAPO's soft overlong punishment (Yu et al., 2025, arXiv:2503.14476, eq. 13) is TRL's
(``trl.rewards.get_soft_overlong_punishment``); :func:`extra_rewards` adds it, scaled by ``--overlong-penalty``, as
one more TRL reward function of weight 1, so it lands in the reward before the group advantages are taken::

    R_length(y) = 0                                      |y| <= L_max - L_cache
                = penalty * ((L_max - L_cache) - |y|) / L_cache   L_max - L_cache < |y| <= L_max
                = -penalty                               L_max < |y|

``L_max`` is ``--max-completion-length`` and ``L_cache`` ``--overlong-buffer``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["OverlongPenalty", "extra_rewards"]


class OverlongPenalty:
    """TRL's soft overlong punishment times ``penalty``: a picklable TRL reward function (the async rollout worker
    and Ray may pickle reward functions; a closure would not pickle)."""

    __name__ = "soft_overlong_punishment"

    def __init__(self, max_completion_length: int, buffer: int, penalty: float) -> None:
        self.max_completion_length, self.buffer, self.penalty = int(max_completion_length), int(buffer), float(penalty)

    def __call__(self, completion_ids: list[list[int]], **kwargs: Any) -> list[float]:
        """The penalty of each completion (0 or negative)."""
        from trl.rewards import get_soft_overlong_punishment

        # TRL's function is a closure (not picklable): made per call, from plain fields that pickle
        punishment = get_soft_overlong_punishment(
            max_completion_len=self.max_completion_length, soft_punish_cache=self.buffer
        )
        return [self.penalty * r for r in punishment(completion_ids)]


def extra_rewards(options: Any) -> list[Any]:
    """The TRL reward functions the options add after the ``--reward`` ones (each of weight 1): the overlong
    penalty with ``--overlong-buffer``; none otherwise."""
    if int(getattr(options, "overlong_buffer", 0) or 0) <= 0:
        return []
    return [OverlongPenalty(options.max_completion_length, options.overlong_buffer, options.overlong_penalty)]
