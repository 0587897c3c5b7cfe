"""swiftcore-recipe-preference: preference-training recipes (``dpo``, ``rm``) on TRL's trainers.

Importing this package (or its entry-point module :mod:`swiftcore_recipe_preference.plugin`) imports neither
torch, transformers nor TRL: the recipes import them when they run.

The face other engines use (``dpo.megatron`` of swiftcore-train-megatron): the ``dpo`` recipe's options, its checks
and pair loading, its pair encoding and its loss, so one definition of each serves every engine.
"""

from __future__ import annotations

from swiftcore.api import lazy_exports

__version__ = "0.1.0"

__all__ = ["DPO_METRICS", "DPOOptions", "check_ref_tokenizer", "dpo_loss", "encode_dpo_pairs", "parse_pair", "prepare"]

_WHERE = {
    "DPOOptions": "options",
    "prepare": "common",
    "encode_dpo_pairs": "encoding",
    "parse_pair": "data",
    "check_ref_tokenizer": "dpo",
    "DPO_METRICS": "loss",
    "dpo_loss": "loss",
}
__getattr__ = lazy_exports(__name__, _WHERE)
