"""swiftcore-recipe-preference: preference-training recipes (``dpo``, ``rm``) on TRL's trainers.

Importing this package (or its entry-point module :mod:`swiftcore_recipe_preference.plugin`) imports neither
torch, transformers nor TRL: the recipes import them when they run.
"""

from __future__ import annotations

__version__ = "0.1.0"
