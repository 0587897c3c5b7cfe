"""``build_head``: the HeadSpec factory, a :class:`~swiftcore_heads.model.HeadModel` around a loaded backbone.

This is what the contract kit calls (``factory(backbone, spec=spec)``) and what a user calls to put a
head on a model they loaded themselves::

    from swiftcore_heads.factory import build_head

    head = build_head(backbone, spec=plugins.registry.get("head", "embedding"))
    head.save_pretrained("out/emb")            # sentence-transformers format + swiftcore_head.json
    again = build_head.from_pretrained("out/emb")

Training (``swiftcore train --task``) builds its model in :mod:`swiftcore_heads.recipe`, which also
applies LoRA; this factory builds the plain, untuned head.
"""

from __future__ import annotations

from typing import Any

__all__ = ["build_head"]


def _decoder(backbone: Any, model_spec: Any) -> Any:
    from swiftcore_heads.model import extract_decoder

    if model_spec is not None:
        return extract_decoder(backbone, model_spec)
    return backbone.get_decoder()


def _backbone_tokenizer(backbone: Any) -> Any:
    """The tokenizer saved beside the backbone's weights (None when it was not loaded from a directory)."""
    from pathlib import Path

    source = getattr(backbone, "name_or_path", "") or getattr(backbone.config, "_name_or_path", "")
    if not source or not (Path(source) / "tokenizer_config.json").is_file():
        return None
    from swiftcore.api.models import load_tokenizer

    return load_tokenizer(source)


def build_head(
    backbone: Any,
    *,
    spec: Any,
    pooling: str | None = None,
    num_labels: int = 1,
    tokenizer: Any = None,
    model_spec: Any = None,
    positive_token: str = "yes",
    negative_token: str = "no",
    normalize: bool = True,
    max_length: int = 512,
) -> Any:
    """Put ``spec``'s head on a loaded backbone.

    Args:
        backbone: a model a :class:`~swiftcore.specs.ModelSpec` loaded (causal LM or multimodal).
        spec: the :class:`~swiftcore.specs.HeadSpec` (its ``task`` picks the head).
        pooling: ``last`` or ``mean`` (default: the spec's first).
        num_labels: classes of a classification head (1 = regression; rerankers always use 1).
        tokenizer: the backbone's tokenizer (default: the one saved in the backbone's directory); the
            generative reranker needs it for its answer tokens, and ``save_pretrained`` saves it.
        model_spec: the backbone's ModelSpec; its ``parts.language_model`` locates the decoder
            (default: ``backbone.get_decoder()``).
        positive_token: the generative reranker's "relevant" answer.
        negative_token: its "not relevant" answer.
        normalize: embeddings are L2-normalised (recorded for inference and sentence-transformers).
        max_length: the longest input inference feeds it (recorded in ``swiftcore_head.json``).

    Returns:
        A :class:`~swiftcore_heads.model.HeadModel` (shares the backbone's weights) with
        ``save_pretrained`` / ``from_pretrained``.

    Raises:
        HeadConfigError: a generative reranker without a tokenizer to find its answer tokens.
    """
    from swiftcore_heads.errors import HeadConfigError
    from swiftcore_heads.model import HeadModel, output_head

    task = spec.task
    pooling = pooling or spec.pooling[0]
    tokenizer = tokenizer if tokenizer is not None else _backbone_tokenizer(backbone)
    info: dict[str, Any] = {"head": spec.name, "pooling": pooling, "max_length": max_length}
    lm_head, yes_no, softcap = None, None, None
    if task == "generative_reranker":
        from swiftcore_heads.data import DEFAULT_INSTRUCTION
        from swiftcore_heads.recipe import yes_no_token_ids

        if tokenizer is None:
            raise HeadConfigError(
                "generative_reranker: pass tokenizer= (the backbone was not loaded from a directory with one); "
                "its answer tokens come from the tokenizer"
            )
        yes_no = yes_no_token_ids(tokenizer, positive_token, negative_token)
        head, tied = output_head(backbone)
        lm_head = None if tied else head
        softcap = getattr(backbone.config.get_text_config(), "final_logit_softcapping", None)
        info.update(
            yes_no_ids=list(yes_no),
            positive_token=positive_token,
            negative_token=negative_token,
            instruction=DEFAULT_INSTRUCTION,
        )
    elif task == "embedding":
        info.update(normalize=normalize, mrl_dims=[])
    else:
        labels = num_labels if task == "classification" else 1
        problem = "regression" if labels == 1 else "single_label_classification"
        info.update(num_labels=labels, problem_type=problem)
    model = HeadModel(
        _decoder(backbone, model_spec),
        task,
        pooling=pooling,
        num_labels=info.get("num_labels", 1),
        lm_head=lm_head,
        yes_no_ids=yes_no,
        logit_softcap=softcap,
    )
    model.head_info = info
    model.tokenizer = tokenizer
    return model


def _from_pretrained(checkpoint_dir: str) -> Any:
    """Load what ``build_head(...).save_pretrained(dir)`` (or ``swiftcore train --task``) wrote."""
    from swiftcore_heads.model import HeadModel

    return HeadModel.from_pretrained(checkpoint_dir)


build_head.from_pretrained = _from_pretrained  # type: ignore[attr-defined]
