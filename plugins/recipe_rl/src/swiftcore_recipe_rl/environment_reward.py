"""What the rewards get from a multi-turn episode (:data:`EPISODE_KEYWORDS`), and the ``environment`` reward
(``--reward environment``): the reward an episode's environment gave.

Importing this module imports neither torch nor TRL.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["EPISODE_KEYWORDS", "environment_reward"]

#: What the rewards get by keyword from a multi-turn rollout, one value per completion: ``messages`` (the episode's
#: conversation: the prompt's messages, then each parsed reply and tool message, ending with the last reply; the
#: ``reward_model`` reward scores it), ``tool_calls`` (how many tool results were fed back to the model), ``turns``
#: (replies generated) and ``env_reward`` (the sum of the environment's step rewards).
EPISODE_KEYWORDS = ("messages", "tool_calls", "turns", "env_reward")


def environment_reward(completions: Sequence[str], *, env_reward: Sequence[float], **kwargs: Any) -> list[float]:
    """``environment``: the episode's reward from its environment (the sum of its step rewards)."""
    return [float(r) for r in env_reward]
