"""Hook implementations of swiftcore-train: the ``sft`` recipe, as plain data (nothing heavy imported)."""

from __future__ import annotations

from swiftcore.api import API_VERSION_STRING, RecipeSpec, hookimpl

SWIFTCORE_API = API_VERSION_STRING


@hookimpl
def swiftcore_register_recipes() -> list[RecipeSpec]:
    """``sft``: supervised fine-tuning, full or LoRA, on transformers' Trainer."""
    return [
        RecipeSpec(
            name="sft",
            run="swiftcore_train.sft:run_sft",
            tasks=("causal_lm", "asr"),
            description="supervised fine-tuning (full or LoRA) on transformers' Trainer; packing, resume, torchrun",
        )
    ]
