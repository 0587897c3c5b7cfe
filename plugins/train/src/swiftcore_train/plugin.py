"""Hook implementations of swiftcore-train: the ``train`` command, the ``sft`` recipe (and its evaluation-during-
training options), the built-in rewards, as plain data (nothing heavy imported), and the training hooks it declares
for capability plugins (:mod:`swiftcore_train.hookspecs`)."""

from __future__ import annotations

from typing import Any

from swiftcore.api import CommandSpec, RecipeSpec, RewardSpec, hookimpl

SWIFTCORE_API = "1.5"  # the plugin API this module was written against: swiftcore_addhooks came in 1.5


@hookimpl
def swiftcore_addhooks(pluginmanager: Any) -> None:
    """Declare ``swiftcore_train_check``, ``swiftcore_train_setup`` (where capabilities, e.g. SP, attach) and
    ``swiftcore_train_run`` (where a model plugin takes a run over)."""
    from swiftcore_train import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


@hookimpl
def swiftcore_register_commands() -> list[CommandSpec]:
    """``swiftcore train``: run a training recipe (``sft`` by default) on any model a plugin provides."""
    return [
        CommandSpec(
            name="train",
            target="swiftcore_train.command:train",
            short_help="Train a model with a recipe (default sft: full or LoRA).",
        )
    ]


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


@hookimpl
def swiftcore_register_rewards() -> list[RewardSpec]:
    """``accuracy``, ``format`` and ``length``: the rewards every RL recipe has (pure Python, torch-free)."""
    module = "swiftcore_train.rewards"
    return [
        RewardSpec(
            name="accuracy",
            function=f"{module}:accuracy",
            columns=("answer",),
            description="1 when the final answer (last \\boxed{}, else last number) equals the row's 'answer'",
        ),
        RewardSpec(
            name="format",
            function=f"{module}:format_match",
            options=("pattern",),
            description="1 when the completion matches a regex (option pattern; default <think>..</think><answer>..)",
        ),
        RewardSpec(
            name="length",
            function=f"{module}:length_penalty",
            options=("max", "buffer"),
            description="DAPO soft overlong penalty: 0 up to max-buffer tokens, linear to -1 at max",
        ),
    ]


@hookimpl
def swiftcore_addoption(parser: Any) -> None:
    """``--eval-every``, ``--eval-dataset``, ``--best-metric``, ... (evaluation during training) and
    ``--loss-chunk-size``: valid with ``sft`` and the preference recipes that read it (``dpo``, ``mpo``, ``kto``)."""
    from swiftcore_train.generation_eval import add_eval_options

    add_eval_options(parser, recipes="sft")
    # The preference recipes (swiftcore-recipe-preference) read the same option for their per-token log-probs.
    loss_recipes = ("sft", "dpo", "mpo", "kto")
    parser.getgroup("sft-loss", "how the loss is computed", recipe=loss_recipes).addoption(
        "--loss-chunk-size",
        type=int,
        default=1024,  # swiftcore_train.loss.DEFAULT_LOSS_CHUNK_SIZE (not imported: this module stays torch-free)
        help="Compute the loss from the last hidden state: the lm_head and the cross-entropy run over chunks of N "
        "supervised tokens, so the full tokens x vocabulary logits never exist (memory grows with N, not with the "
        "sequence); the same loss and gradients as the plain loss. 0: the plain loss. Image/audio batches, --fsdp "
        "and --deepspeed use the plain loss. dpo/mpo/kto: their per-token log-probs are chunked the same way (0: "
        "TRL's fused head).",
    )
