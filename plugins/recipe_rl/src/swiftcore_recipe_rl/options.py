"""The ``grpo`` recipe's own options, added to ``swiftcore train`` by this plugin (``swiftcore_addoption``).

The core's :class:`~swiftcore_train.config.TrainConfig` carries model, data, tuner, optimiser and checkpoints;
:class:`GRPOOptions` carries what only ``--recipe grpo`` reads. It is built from the flags before anything is
loaded, so a bad value fails in ``__post_init__`` within a second.

Flags that another recipe could mean differently carry a ``grpo-`` or ``rollout-`` prefix (``--grpo-loss-type``,
``--grpo-beta``, ``--rollout-temperature``): the preference recipes own ``--loss-type`` and ``--beta``, the heads
``--temperature``, and a flag is one
option across every installed plugin.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["GRPO_LOSS_TYPES", "SCALE_REWARDS", "GRPOOptions", "add_grpo_options"]

#: The GRPO loss aggregations this recipe offers (TRL 1.16's ``GRPOConfig.loss_type`` values of that family).
GRPO_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
#: How rewards are scaled into advantages (TRL's ``scale_rewards``).
SCALE_REWARDS = ("group", "batch", "none")


def _strings(value: Any) -> tuple[str, ...]:
    """A flag given several times (a tuple or list), or once in a config file (a string) -> a tuple."""
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(str(v) for v in value)


@dataclass
class GRPOOptions:
    """Options of ``--recipe grpo`` (flag ``--num-generations`` -> field ``num_generations``).

    Attributes:
        reward: the rewards, by name (``swiftcore rewards`` lists them; ``name@plugin`` picks a provider).
        reward_option: ``REWARD.KEY=VALUE`` options of the rewards (``format.pattern=^<answer>``).
        reward_weight: ``REWARD=WEIGHT``; a reward not named weighs 1.
        reward_fallback: the reward a sample gets from a reward function that raised or gave NaN for it.
        reward_timeout: seconds a reward function may take for one batch before its samples get the fallback
            (None: no limit).
        num_generations: completions sampled per prompt (the group whose rewards normalise each other).
        max_completion_length: the most tokens a completion may have.
        rollout_temperature: sampling temperature of the rollouts.
        rollout_top_p: nucleus sampling of the rollouts (1: off).
        rollout_top_k: top-k sampling of the rollouts (0: off).
        grpo_loss_type: one of :data:`GRPO_LOSS_TYPES` (how per-token losses are averaged).
        grpo_beta: weight of the KL penalty to the reference model (0: no reference model is kept).
        grpo_epsilon: the ratio clipping range's lower side, ``1 - epsilon``.
        grpo_epsilon_high: its upper side, ``1 + epsilon_high`` (default: ``grpo_epsilon``; DAPO uses 0.28).
        scale_rewards: one of :data:`SCALE_REWARDS`.
        num_iterations: optimisation passes over each batch of rollouts (the clipped ratio matters above 1).
        mask_truncated_completions: leave completions that hit ``max_completion_length`` out of the loss.
    """

    reward: tuple[str, ...] = ()
    reward_option: tuple[str, ...] = ()
    reward_weight: tuple[str, ...] = ()
    reward_fallback: float = 0.0
    reward_timeout: float | None = None
    num_generations: int = 8
    max_completion_length: int = 256
    rollout_temperature: float = 1.0
    rollout_top_p: float = 1.0
    rollout_top_k: int = 0
    grpo_loss_type: str = "dapo"
    grpo_beta: float = 0.0
    grpo_epsilon: float = 0.2
    grpo_epsilon_high: float | None = None
    scale_rewards: str = "group"
    num_iterations: int = 1
    mask_truncated_completions: bool = False

    def __post_init__(self) -> None:
        self.reward = _strings(self.reward)
        self.reward_option = _strings(self.reward_option)
        self.reward_weight = _strings(self.reward_weight)
        problems = []
        if not self.reward:
            problems.append("--reward: name at least one reward (e.g. --reward format); `swiftcore rewards` lists them")
        # Syntax only (swiftcore_train.rewards parses them for the run).
        for item in self.reward_option:
            key, sep, _ = item.partition("=")
            if not sep or not re.fullmatch(r"[a-z0-9][a-z0-9_.\-@]*\.[a-z0-9_]+", key.strip()):
                problems.append(f"--reward-option {item!r}: expected REWARD.KEY=VALUE, e.g. format.pattern='^<answer>'")
        try:
            self.weights()
        except ValueError as exc:
            problems.append(str(exc))
        if self.grpo_loss_type not in GRPO_LOSS_TYPES:
            problems.append(f"--grpo-loss-type: {self.grpo_loss_type!r} is not one of {', '.join(GRPO_LOSS_TYPES)}")
        if self.scale_rewards not in SCALE_REWARDS:
            problems.append(f"--scale-rewards: {self.scale_rewards!r} is not one of {', '.join(SCALE_REWARDS)}")
        for name in ("num_generations", "max_completion_length", "num_iterations"):
            if int(getattr(self, name)) < 1:
                problems.append(f"--{name.replace('_', '-')}: must be at least 1")
        if self.num_generations < 2:
            problems.append("--num-generations: GRPO compares completions within a group; give at least 2")
        finite = {
            "reward_fallback": (-math.inf, math.inf),
            "rollout_temperature": (0.0, math.inf),
            "rollout_top_p": (0.0, 1.0 + 1e-12),
            "grpo_beta": (-1e-12, math.inf),
            "grpo_epsilon": (0.0, math.inf),
        }
        for name, (low, high) in finite.items():
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and low < value < high):
                problems.append(f"--{name.replace('_', '-')}: {value!r} is out of range")
        timeout = self.reward_timeout
        if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
            problems.append(f"--reward-timeout: {timeout!r} must be a positive number of seconds")
        high = self.grpo_epsilon_high
        if high is not None and not (math.isfinite(high) and high > 0):
            problems.append(f"--grpo-epsilon-high: {high!r} must be a finite positive number")
        if self.rollout_top_k < 0:
            problems.append(f"--rollout-top-k: {self.rollout_top_k} must be >= 0 (0: off)")
        if problems:
            raise ValueError("; ".join(problems))

    def weights(self) -> dict[str, float]:
        """``--reward-weight NAME=W`` values as ``{name: weight}`` (a reward not named weighs 1)."""
        out = {}
        for item in self.reward_weight:
            name, sep, value = item.partition("=")
            try:
                weight = float(value)
            except ValueError:
                weight = math.nan
            if not sep or not name or not math.isfinite(weight):
                raise ValueError(f"--reward-weight {item!r}: expected REWARD=WEIGHT with a finite number")
            if name not in self.reward:
                raise ValueError(f"--reward-weight {item!r}: {name!r} is not one of the --reward values")
            out[name] = weight
        return out


_HELP = {
    "reward": "Reward function by name (repeatable; `swiftcore rewards` lists them, NAME@PLUGIN picks a provider).",
    "reward_option": "A reward's option as REWARD.KEY=VALUE (repeatable), e.g. format.pattern='^<answer>'.",
    "reward_weight": "A reward's weight as REWARD=WEIGHT (repeatable; default 1).",
    "reward_fallback": "Reward given to a sample whose reward function raised or returned NaN (logged).",
    "reward_timeout": "Seconds a reward function may take per batch; then its samples get the fallback (logged).",
    "num_generations": "Completions sampled per prompt (the group that normalises rewards).",
    "max_completion_length": "Most tokens per completion.",
    "rollout_temperature": "Sampling temperature of the rollouts.",
    "rollout_top_p": "Nucleus sampling of the rollouts (1 = off).",
    "rollout_top_k": "Top-k sampling of the rollouts (0 = off).",
    "grpo_loss_type": f"GRPO loss aggregation: {', '.join(GRPO_LOSS_TYPES)}.",
    "grpo_beta": "KL penalty weight to the reference model (0 = no reference model).",
    "grpo_epsilon": "Clipping range of the probability ratio: [1 - eps, 1 + eps_high].",
    "grpo_epsilon_high": "Upper clipping epsilon (default: --grpo-epsilon; DAPO uses 0.28).",
    "scale_rewards": f"Reward scaling into advantages: {', '.join(SCALE_REWARDS)}.",
    "num_iterations": "Optimisation passes over each batch of rollouts.",
    "mask_truncated_completions": "Leave completions cut at --max-completion-length out of the loss.",
}

_TYPES = {"grpo_epsilon_high": float, "reward_timeout": float}


def add_grpo_options(parser: Any) -> None:
    """Add the ``grpo`` options, valid with ``--recipe grpo`` only."""
    group = parser.getgroup("grpo", "GRPO online RL (swiftcore-recipe-rl)", recipe="grpo")
    for f in fields(GRPOOptions):
        flag = "--" + f.name.replace("_", "-")
        default = f.default
        kwargs: dict[str, Any] = {"help": _HELP[f.name], "default": default}
        if isinstance(default, bool):
            group.addoption(f"{flag}/--no-{f.name.replace('_', '-')}", **kwargs)
        elif isinstance(default, tuple):
            group.addoption(flag, multiple=True, **kwargs)
        elif f.name in _TYPES:
            group.addoption(flag, type=_TYPES[f.name], **kwargs)
        else:
            group.addoption(flag, type=type(default), **kwargs)
