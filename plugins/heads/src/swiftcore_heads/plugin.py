"""Hook implementations of swiftcore-heads: the four lm_heads and their training recipes, as plain data."""

from __future__ import annotations

from swiftcore.api import HeadSpec, RecipeSpec, hookimpl

SWIFTCORE_API = "1.5"  # written against plugin API 1.5: the package face uses swiftcore.api.lazy_exports

_PKG = "swiftcore_heads"
# One implementation for every task: the factory builds, the recipe trains, the predictor serves.
_CALLABLES = {
    "factory": f"{_PKG}.factory:build_head",
    "recipe": f"{_PKG}.recipe:run_head_training",
    "predictor": f"{_PKG}.predictor:load_predictor",
}


@hookimpl
def swiftcore_register_lm_heads() -> list[HeadSpec]:
    """classification, embedding, reranker and generative_reranker; one implementation for every backbone."""
    return [
        HeadSpec(
            name="classification",
            task="classification",
            **_CALLABLES,
            pooling=("last", "mean"),
            losses=("cross_entropy", "bce", "mse"),
            saved_as="transformers-sequence-classification",
            description="sequence classification / regression / multi-label: pooled token -> score layer",
        ),
        HeadSpec(
            name="embedding",
            task="embedding",
            **_CALLABLES,
            pooling=("last", "mean"),
            losses=("infonce", "cosine_similarity", "contrastive"),
            saved_as="sentence-transformers",
            description="text embeddings (last/mean pooling, L2 norm, InfoNCE, Matryoshka)",
        ),
        HeadSpec(
            name="reranker",
            task="reranker",
            **_CALLABLES,
            pooling=("last", "mean"),
            losses=("listwise", "pointwise"),
            saved_as="transformers-sequence-classification",
            description="cross-encoder reranker: (query, document) -> relevance score from a score layer",
        ),
        HeadSpec(
            name="generative_reranker",
            task="generative_reranker",
            **_CALLABLES,
            pooling=("last",),
            losses=("listwise", "pointwise"),
            saved_as="transformers-causal-lm",
            description="Qwen3-Reranker style: logit('yes') - logit('no') at the last position, no new parameters",
        ),
    ]


@hookimpl
def swiftcore_register_recipes() -> list[RecipeSpec]:
    """One recipe per head, named after its task (``swiftcore train --recipe embedding``, or ``--task embedding``)."""
    tasks = {
        "classification": "train a classification / regression head",
        "embedding": "train an embedding model (InfoNCE, Matryoshka dims)",
        "reranker": "train a cross-encoder reranker",
        "generative_reranker": "train a generative (yes/no logit) reranker",
    }
    return [
        RecipeSpec(
            name=task,
            run=f"{_PKG}.recipe:run_recipe",
            config=f"{_PKG}.options:HeadOptions",
            tasks=(task,),
            description=description,
        )
        for task, description in tasks.items()
    ]


@hookimpl
def swiftcore_addoption(parser) -> None:  # type: ignore[no-untyped-def]
    """The head recipes' options (``--num-labels``, ``--pooling``, ``--mrl-dims``, ...), for those recipes only."""
    from swiftcore_heads.options import add_head_options

    add_head_options(parser)
