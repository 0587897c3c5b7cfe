"""Hook implementations of swiftcore-plugin-eagle3: the ``eagle3`` recipe and its options, as plain data; the
``swiftcore_speculative_decoder`` hook (declared by swiftcore-infer) it implements, through which
``swiftcore infer`` / ``swiftcore deploy --draft DIR`` decode with an Eagle3 draft.

Importing it imports neither torch, transformers nor speculators.
"""

from __future__ import annotations

from typing import Any

from swiftcore.api import RecipeSpec, hookimpl

SWIFTCORE_API = "1.5"  # recipe options tagged with the recipe (swiftcore_addoption's getgroup(recipe=...))


# optionalhook: swiftcore-infer declares the hook; without it installed this plugin still trains drafts.
@hookimpl(optionalhook=True)
def swiftcore_speculative_decoder(draft_dir: str, target: Any) -> Any | None:
    """The greedy Eagle3 decoder for a speculators Eagle3 draft in ``draft_dir``; None for any other directory."""
    from swiftcore_eagle3.speculative import load_decoder

    return load_decoder(draft_dir, target)


@hookimpl
def swiftcore_register_recipes() -> list[RecipeSpec]:
    """``eagle3``: train an Eagle3 draft head for a frozen target model (speculative decoding)."""
    return [
        RecipeSpec(
            name="eagle3",
            run="swiftcore_eagle3.recipe:run",
            config="swiftcore_eagle3.options:Eagle3Options",
            tasks=("causal_lm",),
            description="an Eagle3 draft head for the frozen --model (speculators' format, served by vLLM)",
        )
    ]


@hookimpl
def swiftcore_addoption(parser: Any) -> None:
    """The ``eagle3`` recipe's own options (``--draft-layers``, ``--ttt-steps``, ``--aux-layers``,
    ``--draft-vocab-size``, ``--hidden-states-cache``)."""
    import click  # the CLI's own dependency, cheap; for the option types

    group = parser.getgroup("eagle3", "Eagle3 draft head (swiftcore-plugin-eagle3)", recipe="eagle3")
    group.addoption(
        "--draft-layers",
        default=1,
        type=click.IntRange(min=1),
        help="Decoder layers of the draft head (Eagle3 uses 1).",
    )
    group.addoption(
        "--ttt-steps",
        default=3,
        type=click.IntRange(min=1),
        help="Training-time-test steps: how many tokens ahead the draft learns to predict from its own hidden "
        "states; also the speculative tokens per verification written into the draft's config.",
    )
    group.addoption(
        "--aux-layers",
        default=None,
        metavar="I,J,K",
        help="The target's hidden states the draft reads (indices into transformers' hidden_states: 0 is the "
        "embeddings, i the output of layer i-1, as vLLM counts them); default 2,N/2,N-3 for N layers "
        "(1,N/2,N-1 below 6 layers).",
    )
    group.addoption(
        "--draft-vocab-size",
        default=None,
        type=click.IntRange(min=1),
        metavar="N",
        help="The draft's vocabulary: the N tokens the dataset's trained (assistant) tokens use most (speculators' "
        "draft_vocab_size, d2t/t2d mappings saved with the draft, as vLLM loads them); a smaller output head, "
        "proposals mapped back to the target's ids. Default: the target's whole vocabulary.",
    )
    group.addoption(
        "--hidden-states-cache",
        default=None,
        type=click.Path(file_okay=False),
        metavar="DIR",
        help="Compute the target's hidden states once, write them under DIR (safetensors, in a subdirectory named by "
        "a fingerprint of the checkpoint, the encoded dataset and --aux-layers) and read them back at every step "
        "and in later runs with the same fingerprint, instead of running the target at every step. A damaged cache "
        "is rebuilt (only the files swiftcore wrote are deleted). Default: run the target at every step.",
    )
