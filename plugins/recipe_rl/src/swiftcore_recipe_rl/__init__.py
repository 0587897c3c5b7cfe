"""swiftcore-recipe-rl: online RL recipes for swiftcore (``swiftcore train --recipe grpo --reward NAME``).

Importing it imports no torch, transformers or TRL: the recipe imports them when it runs.
"""

__all__: list[str] = []
