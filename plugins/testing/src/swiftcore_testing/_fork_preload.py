"""Imported by :mod:`swiftcore_testing.forked`'s fork server, never by a test: the heavy modules a ``swiftcore``
command imports, once, so that each forked command starts with them imported. Each is optional: an environment
without one starts its commands without it, as it would anyway."""

from __future__ import annotations

import importlib

#: Modules that torch, transformers, peft, trl, datasets and accelerate load for training and serving a model, and
#: the modeling modules of the families swiftcore's tests make tiny checkpoints of.
MODULES = (
    "torch",
    "transformers",
    "transformers.trainer",
    "transformers.modeling_utils",
    "transformers.models.auto.modeling_auto",
    "transformers.models.auto.tokenization_auto",
    "transformers.models.auto.processing_auto",
    "transformers.models.qwen3_5.modeling_qwen3_5",
    "transformers.models.qwen3_5_moe.modeling_qwen3_5_moe",
    "transformers.models.olmoe.modeling_olmoe",
    "transformers.models.gemma4.modeling_gemma4",
    "peft",
    "trl",
    "datasets",
    "accelerate",
    "safetensors.torch",
    "swiftcore.api.cli",
    "swiftcore_train.trainer",
    "swiftcore_infer",
)

for _name in MODULES:
    try:
        importlib.import_module(_name)
    except Exception:  # a missing or broken optional module: the command imports it itself (and fails as it would)
        pass
