"""ms-swift ``--external_plugins`` file of figure 11 (``msswift_grpo.py``): the reward swiftcore's side uses, and the
rollout clock swiftcore's side logs. Loaded only inside ms-swift processes (peer virtual environment).

- ``swiftcore_format``: swiftcore's built-in ``format`` reward (``swiftcore_train.rewards.format_match``): 1.0 when
  the completion matches the regex ``SWIFTCORE_BENCH_REWARD_PATTERN`` (``re.search``, ``re.DOTALL``), else 0.0.
  ms-swift's own ``format`` reward has a fixed pattern (``<think>..</think><answer>..</answer>``), which a random
  tiny model never matches (every reward 0, every advantage 0), so the benchmark gives both sides one regex.
- ``bench/rollout_s``, ``bench/rollout_tokens``, ``bench/reward_s`` in ``logging.jsonl``: seconds of each rollout
  (``RolloutTrainerMixin._generate_completions``: prompt encoding, the TransformersEngine's generation on the
  policy, decoding), the completion tokens it produced, and seconds of the reward functions
  (``GRPOTrainer._compute_rewards_per_func``). ms-swift times its generation itself (``profiling_context(self,
  'generate')``) but reports that to wandb/swanlab only, never to its own log; swiftcore's ``rollout_s`` /
  ``rollout_tokens`` / ``reward_s`` (its ``StepTiming``) are the same spans of TRL's ``_generate`` and
  ``_calculate_rewards``.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

from swift.rewards.orm import ORM, orms
from swift.rlhf_trainers.grpo_trainer import GRPOTrainer
from swift.rlhf_trainers.rollout_mixin import RolloutTrainerMixin

PATTERN = os.environ.get("SWIFTCORE_BENCH_REWARD_PATTERN", r"^\s*<think>.*?</think>\s*<answer>.*?</answer>\s*$")


class SwiftcoreFormat(ORM):
    """swiftcore's ``format`` reward with the pattern of ``SWIFTCORE_BENCH_REWARD_PATTERN``."""

    def __call__(self, completions: list[str], **kwargs: Any) -> list[float]:
        pattern = re.compile(PATTERN, re.DOTALL)
        return [1.0 if pattern.search(c) else 0.0 for c in completions]


orms["swiftcore_format"] = SwiftcoreFormat


def _tokens(sample: Any) -> int:
    ids = getattr(sample, "response_token_ids", None) or []
    return sum(len(x) for x in ids) if ids and isinstance(ids[0], list) else len(ids)


_generate = RolloutTrainerMixin._generate_completions
_rewards = GRPOTrainer._compute_rewards_per_func


def _timed_generate(self: Any, samples: list) -> list:
    start = time.perf_counter()
    out = _generate(self, samples)
    mode = "train" if self.model.training else "eval"
    self._metrics[mode]["bench/rollout_s"].append(time.perf_counter() - start)
    self._metrics[mode]["bench/rollout_tokens"].append(float(sum(_tokens(s) for s in out)))
    return out


def _timed_rewards(self: Any, samples: list) -> Any:
    start = time.perf_counter()
    out = _rewards(self, samples)
    mode = "train" if self.model.training else "eval"
    self._metrics[mode]["bench/reward_s"].append(time.perf_counter() - start)
    return out


RolloutTrainerMixin._generate_completions = _timed_generate
GRPOTrainer._compute_rewards_per_func = _timed_rewards
