"""swiftcore-recipe-preference: preference-training recipes (``dpo``, ``rm``) on TRL's trainers.

Importing this package (or its entry-point module :mod:`swiftcore_recipe_preference.plugin`) imports neither
torch, transformers nor TRL: the recipes import them when they run.

The face other engines use (``dpo.megatron``, ``kto.megatron`` and ``rm.megatron`` of swiftcore-train-megatron): each
recipe's options, checks, row loading and encoding, the ``dpo`` / ``kto`` / ``rm`` losses (TRL's, run on given
log-probs or rewards), and the ``kto`` / ``rm`` batch rules, so one definition of each serves every engine.
"""

from __future__ import annotations

from swiftcore.api import lazy_exports

__version__ = "0.1.0"

__all__ = [
    "DPO_METRICS",
    "DPOOptions",
    "KTOOptions",
    "KTO_METRICS",
    "RM_METRICS",
    "RMOptions",
    "build_reward_trainer",
    "check_ref_tokenizer",
    "dpo_loss",
    "encode_dpo_pairs",
    "encode_kto_examples",
    "encode_rm_pairs",
    "kto_batch_size",
    "kto_loss",
    "load_reward_model",
    "load_unpaired",
    "parse_pair",
    "prepare",
    "reward_loss",
    "split_pairs",
]

_WHERE = {
    "DPOOptions": "options",
    "KTOOptions": "options",
    "RMOptions": "options",
    "encode_kto_examples": "encoding",
    "encode_rm_pairs": "encoding",
    "kto_batch_size": "kto",
    "load_reward_model": "rm",
    "build_reward_trainer": "rm",
    "load_unpaired": "data",
    "split_pairs": "data",
    "prepare": "common",
    "encode_dpo_pairs": "encoding",
    "parse_pair": "data",
    "check_ref_tokenizer": "dpo",
    "DPO_METRICS": "loss",
    "dpo_loss": "loss",
    "KTO_METRICS": "loss",
    "kto_loss": "loss",
    "RM_METRICS": "loss",
    "reward_loss": "loss",
}
__getattr__ = lazy_exports(__name__, _WHERE)
