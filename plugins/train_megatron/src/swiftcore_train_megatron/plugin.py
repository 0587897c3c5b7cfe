"""Hook implementations of swiftcore-train-megatron: the ``sft.megatron``, ``dpo.megatron``, ``kto.megatron``,
``rm.megatron``, ``grpo.megatron`` and ``gkd.megatron`` recipes and their parallelism options."""

from __future__ import annotations

from typing import Any

from swiftcore.api import RecipeSpec, hookimpl

SWIFTCORE_API = "1.4"  # the plugin API this module was written against (a literal: see docs/writing-a-plugin.md)

#: The recipes this engine trains, as ``swiftcore train --engine megatron --recipe NAME`` names them.
RECIPES = ("sft.megatron", "dpo.megatron", "kto.megatron", "rm.megatron", "grpo.megatron", "gkd.megatron")


@hookimpl
def swiftcore_register_recipes() -> list[RecipeSpec]:
    """``sft.megatron``: supervised fine-tuning on megatron-core (``swiftcore train --engine megatron``);
    ``dpo.megatron``, ``kto.megatron`` and ``rm.megatron``: the ``dpo``, ``kto`` and ``rm`` recipes
    (swiftcore-recipe-preference) on megatron-core; ``grpo.megatron`` and ``gkd.megatron``: the ``grpo`` and ``gkd``
    recipes (swiftcore-recipe-rl)."""
    return [
        RecipeSpec(
            name="sft.megatron",
            run="swiftcore_train_megatron.recipe:run_megatron_sft",
            config="swiftcore_train_megatron.layout:ParallelLayout",
            tasks=("causal_lm",),
            description="supervised fine-tuning (full weights or LoRA) on megatron-core through the family's bridge: "
            "--tp, --pp, --ep under torchrun; checkpoints resume exactly and load in transformers",
        ),
        RecipeSpec(
            name="dpo.megatron",
            run="swiftcore_train_megatron.dpo:run_megatron_dpo",
            config="swiftcore_train_megatron.layout:ParallelLayout",
            tasks=("causal_lm",),
            description="DPO on megatron-core (full weights or LoRA, --tp/--pp under torchrun; resumes): "
            "the dpo recipe's pairs, "
            "template encoding and loss (TRL's), reference log-probs computed once from the initial weights",
        ),
        RecipeSpec(
            name="kto.megatron",
            run="swiftcore_train_megatron.kto:run_megatron_kto",
            config="swiftcore_train_megatron.layout:ParallelLayout",
            tasks=("causal_lm",),
            description="KTO on megatron-core (full weights or LoRA, --tp/--pp under torchrun; resumes): "
            "the kto recipe's rows, "
            "order, encoding and loss (TRL's), reference log-probs computed once from the initial weights",
        ),
        RecipeSpec(
            name="rm.megatron",
            run="swiftcore_train_megatron.rm:run_megatron_rm",
            config="swiftcore_train_megatron.layout:ParallelLayout",
            tasks=("causal_lm",),
            description="reward model on megatron-core (full weights or LoRA, --tp under torchrun; resumes): "
            "the rm recipe's "
            "pairs, encoding, score layer and loss (TRL's); checkpoints load with AutoModelForSequenceClassification",
        ),
        RecipeSpec(
            name="grpo.megatron",
            run="swiftcore_train_megatron.grpo:run_megatron_grpo",
            config="swiftcore_train_megatron.layout:ParallelLayout",
            tasks=("causal_lm",),
            description="GRPO on megatron-core (full weights or LoRA, --tp under torchrun): the grpo recipe's prompts, "
            "rewards, advantages and loss (TRL's); rank 0 generates with the transformers backend, synced each step",
        ),
        RecipeSpec(
            name="gkd.megatron",
            run="swiftcore_train_megatron.gkd:run_megatron_gkd",
            config="swiftcore_train_megatron.layout:ParallelLayout",
            tasks=("causal_lm",),
            description="GKD on-policy distillation on megatron-core (full weights or LoRA, --tp under torchrun): "
            "the gkd "
            "recipe's prompts, teacher and loss (TRL's generalised JSD on the TP-gathered logits); rank 0 generates "
            "with the transformers backend, synced each step",
        ),
    ]


@hookimpl
def swiftcore_addoption(parser: Any) -> None:
    """``--tp``, ``--pp``, ``--ep``: the megatron-core parallel layout (valid with ``--engine megatron``)."""
    group = parser.getgroup("megatron", "megatron-core parallelism (--engine megatron)", recipe=RECIPES)
    group.addoption(
        "--tp",
        type=int,
        default=1,
        help="Tensor-parallel size: each layer's weights split over this many ranks (divides the attention heads, "
        "kv heads, MLP width and vocabulary).",
    )
    group.addoption(
        "--pp",
        type=int,
        default=1,
        help="Pipeline-parallel size: the decoder layers split into this many stages of equal length, one per rank "
        "(divides the layer count); micro-batches (--gradient-accumulation-steps) flow through them on "
        "megatron-core's 1F1B schedule. World size = tp x pp x data-parallel replicas.",
    )
    group.addoption(
        "--ep",
        type=int,
        default=1,
        help="Expert-parallel size (MoE families): the routed experts split over this many data-parallel ranks.",
    )
    group.addoption(
        "--vpp",
        type=int,
        default=1,
        help="Virtual pipeline size (with --pp 2 or more): each pipeline rank holds this many model chunks, run on "
        "megatron-core's interleaved 1F1B schedule (a smaller pipeline bubble); --pp x --vpp divides the layer count "
        "and --gradient-accumulation-steps is a multiple of --pp. Takes no ranks of its own.",
    )
    group.addoption(
        "--lora-init-adapter",
        default=None,
        metavar="DIR",
        help="With --tuner lora: start the adapter from this peft adapter directory (adapter_config.json, "
        "adapter_model.safetensors; e.g. one trained earlier, or the one the transformers engine initialises) "
        "instead of a fresh init; its r, lora_alpha and layers must be this run's.",
    )
    group.addoption(
        "--cp",
        type=int,
        default=1,
        help="Context-parallel size: every sequence split over this many ranks (megatron-core's load-balanced 2 x cp "
        "chunks). Needs Transformer Engine's attention in fp16/bf16: refused so far, with the reason "
        "(docs/distributed.md).",
    )
