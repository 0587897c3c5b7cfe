"""Sequence parallelism in ``swiftcore train`` (``sft`` and the head recipes): checks, collator padding, trainer.

The plugin module implements swiftcore-train's hooks with these functions, when ``--sequence-parallel-size`` is
above 1: ``swiftcore_train_check`` calls :func:`check_before_load` before anything loads, and
``swiftcore_train_setup`` calls :func:`apply_sequence_parallel` once, after the model is loaded and the training
arguments (hence ``torch.distributed``) exist. That refuses what cannot be trained exactly (a
:class:`~swiftcore.api.SwiftcoreError` naming the flag and what to do), builds the process groups, points the
model's attention at the SP functions, and puts the SP trainer class and collator in the run's setup instead of
the plain ones (:func:`setup_sequence_parallel`, for a head model :func:`setup_head_sequence_parallel`).

Nothing here imports torch or transformers at module level.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from swiftcore.api import SwiftcoreError
from swiftcore_sequence_parallel import HEAD_RECIPES, IGNORE_INDEX

__all__ = [
    "SUPPORTED_LAYER_TYPES",
    "PadToMultipleCollator",
    "SequenceParallelOptions",
    "apply_sequence_parallel",
    "check_before_load",
    "check_flags",
    "check_model",
    "check_world",
    "pad_batch_to_multiple",
    "setup_head_sequence_parallel",
    "setup_sequence_parallel",
]

#: ``config.layer_types`` entries whose layers are softmax attention through transformers' attention interface.
SUPPORTED_LAYER_TYPES = frozenset({"full_attention", "sliding_attention"})
#: What an unsupported layer kind is, for the refusal message.
_LAYER_KIND_NAMES = {
    "linear_attention": "gated DeltaNet linear-attention layers (a recurrence over the sequence, e.g. Qwen3.5)",
    "compressed_sparse_attention": "compressed sparse attention layers (DeepSeek-V4)",
    "heavily_compressed_attention": "heavily compressed attention layers (DeepSeek-V4)",
    "indexed_attention": "indexer-selected sparse attention layers (DeepSeek sparse attention, e.g. GLM-5)",
}
#: Module class-name parts of sequence mixers that do not go through the attention interface (backstop for
#: configs without ``layer_types``).
_UNSUPPORTED_MODULES = ("GatedDeltaNet", "Mamba", "Indexer", "LinearAttention")


@dataclass(frozen=True)
class SequenceParallelOptions:
    """The values of ``--sequence-parallel-size``, ``--sp-mode`` and ``--sp-ring-impl``."""

    size: int = 1
    mode: str = "ulysses"
    ring_impl: str = "p2p"

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None) -> SequenceParallelOptions:
        """Read the options of a recipe's ``options`` dict (missing keys: the defaults; other keys ignored).

        Raises:
            SwiftcoreError: a size below 1.
        """
        opts = dict(options or {})
        size = opts.get("sequence_parallel_size")
        size = 1 if size is None else size
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise SwiftcoreError(f"--sequence-parallel-size: {size!r} must be a whole number of at least 1")
        mode = opts.get("sp_mode") or "ulysses"
        # The name for Ulysses-inside-ring is "both"; the building blocks call it "hybrid".
        mode = "hybrid" if mode == "both" else mode
        if mode not in ("ulysses", "ring", "hybrid"):
            raise SwiftcoreError(f"--sp-mode: {mode!r} is not one of ulysses, ring, both")
        return cls(size=size, mode=mode, ring_impl=opts.get("sp_ring_impl") or "p2p")

    @property
    def enabled(self) -> bool:
        """Whether sequences are split at all."""
        return self.size > 1


def check_world(world_size: int, size: int) -> None:
    """SwiftcoreError unless ``size`` divides the number of processes (the rest is data parallel)."""
    if world_size % size:
        hint = (
            f"run under torchrun with --nproc-per-node a multiple of {size} (e.g. torchrun --nproc-per-node {size} "
            "$(which swiftcore) train ...)"
            if world_size == 1
            else f"use --nproc-per-node a multiple of {size}, or an SP size dividing {world_size}"
        )
        raise SwiftcoreError(
            f"--sequence-parallel-size {size} does not divide the world size {world_size} (processes): {hint}"
        )


def check_flags(cfg: Any, multimodal: bool = False) -> None:
    """Refuse run options sequence parallelism cannot train exactly (before anything is built).

    ``--packing`` / ``--padding-free`` are supported (packed rows keep their per-sample position ids);
    image or audio samples are not (the vision/audio encoders would see one shard's placeholders only).
    """
    if multimodal:
        raise SwiftcoreError(
            "--sequence-parallel-size does not support image or audio samples (the media encoders are not split); "
            "train text-only data, or drop --sequence-parallel-size"
        )


def _text_config(config: Any) -> Any:
    return getattr(config, "text_config", None) or config


def check_model(model: Any, opts: SequenceParallelOptions) -> int:
    """Refuse a model sequence parallelism cannot train exactly; returns its query head count.

    Refused: layers that mix the sequence outside softmax attention (state-space layers, compressed or
    indexer-selected sparse attention, linear attention other than transformers' gated DeltaNet, which
    :mod:`~swiftcore_sequence_parallel.linear_attention` carries across the shards), attention sinks (not in
    the SP kernels), a router auxiliary loss (computed per shard, so not the whole sequence's), and for
    Ulysses a head count the SP size does not divide.
    """
    from swiftcore_sequence_parallel.linear_attention import is_gated_deltanet

    config = _text_config(model.config)
    supported = set(SUPPORTED_LAYER_TYPES)
    mixers = [m for m in model.modules() if "GatedDeltaNet" in type(m).__name__]
    if mixers and all(is_gated_deltanet(m) for m in mixers):
        supported.add("linear_attention")  # carried across shards by swiftcore_sequence_parallel.linear_attention
    kinds = sorted(set(getattr(config, "layer_types", None) or ()) - supported)
    _refuse_layer_kinds(kinds, type(model).__name__)
    for name, module in model.named_modules():
        kind = type(module).__name__
        if any(part in kind for part in _UNSUPPORTED_MODULES) and not is_gated_deltanet(module):
            raise SwiftcoreError(
                f"--sequence-parallel-size: this model has {kind} layers ({name}), which mix the sequence outside "
                "softmax attention and cannot be split over ranks; drop --sequence-parallel-size for this model"
            )
    sinks = next((n for n, _ in model.named_parameters() if n.rsplit(".", 1)[-1] == "sinks"), None)
    if sinks is not None:
        raise SwiftcoreError(
            f"--sequence-parallel-size: this model's attention has learned sinks ({sinks}), which the "
            "sequence-parallel attention does not implement; drop --sequence-parallel-size for this model"
        )
    if getattr(config, "output_router_logits", False):
        raise SwiftcoreError(_ROUTER_LOSS_MESSAGE)
    heads = int(getattr(config, "num_attention_heads", 0) or 0)
    _check_heads(heads, opts)
    return heads


def check_before_load(model_dir: str, options: Mapping[str, Any] | None) -> None:
    """What can be refused from ``config.json`` and the environment, before the (slow) model load.

    The world size (torchrun's ``WORLD_SIZE``), layer kinds named in ``layer_types``, a router auxiliary loss
    and, for Ulysses, the head count; :func:`check_model` checks the loaded modules again (the backstop for
    configs that name no layer kinds). Does nothing when SP is off.

    Raises:
        SwiftcoreError: the same messages as :func:`check_world` and :func:`check_model`.
    """
    import os

    from swiftcore.api.models import read_hf_config

    opts = SequenceParallelOptions.from_options(options)
    if not opts.enabled:
        return
    check_world(int(os.environ.get("WORLD_SIZE", "1")), opts.size)
    config = read_hf_config(model_dir) or {}  # none: the model's own loader reports it
    text = config.get("text_config") or config
    # Gated DeltaNet layers pass when the loaded modules are transformers' (check_model decides).
    kinds = sorted(set(text.get("layer_types") or ()) - SUPPORTED_LAYER_TYPES - {"linear_attention"})
    _refuse_layer_kinds(kinds, model_dir)
    if text.get("output_router_logits"):
        raise SwiftcoreError(_ROUTER_LOSS_MESSAGE)
    _check_heads(int(text.get("num_attention_heads") or 0), opts)


_ROUTER_LOSS_MESSAGE = (
    "--sequence-parallel-size: this model adds a router auxiliary loss (config.output_router_logits), which would "
    "be computed per shard rather than over the whole sequence; set output_router_logits to false in the model's "
    "config.json, or drop --sequence-parallel-size"
)


def _refuse_layer_kinds(kinds: list[str], model: str) -> None:
    """SwiftcoreError naming ``kinds`` (``config.layer_types`` entries SP cannot split), if there are any."""
    if kinds:
        described = "; ".join(_LAYER_KIND_NAMES.get(k, f"{k!r} layers") for k in kinds)
        raise SwiftcoreError(
            f"--sequence-parallel-size: this model ({model}) has {described}, which sequence parallelism cannot "
            "split (only softmax attention layers, full or sliding window, and Qwen3.5's gated DeltaNet are "
            "supported); drop --sequence-parallel-size for this model"
        )


def _check_heads(heads: int, opts: SequenceParallelOptions) -> None:
    if opts.mode == "ulysses" and heads and heads % opts.size:
        raise SwiftcoreError(
            f"--sequence-parallel-size {opts.size} with --sp-mode ulysses splits the attention heads over "
            f"{opts.size} ranks, but the model has {heads} heads: choose a size dividing {heads}, or "
            "--sp-mode ring (any size), or --sp-mode both"
        )


def pad_batch_to_multiple(batch: dict[str, Any], multiple: int, pad_token_id: int) -> dict[str, Any]:
    """Pad a collated batch along the sequence to a multiple of ``multiple`` (in place; returns it).

    Padded batches (with an ``attention_mask``) get ``pad_token_id`` / label -100 / mask 0 on the right.
    Packed rows (``position_ids``, no mask) get one extra dummy sample of pad tokens, labels -100, positions
    ``0..p-1``: a new sample boundary, so no real sample attends to it and none of it is a target; the
    per-sample lengths (``seq_lens``, ``cu_seq_lens_*``) are extended to match.
    """
    import torch

    ids = batch["input_ids"]
    length = int(ids.shape[1])
    pad = -length % multiple
    if pad == 0:
        return batch
    rows = ids.shape[0]

    def extend(value: Any, fill: Any) -> Any:
        if not torch.is_tensor(fill):
            fill = torch.full((rows, pad), fill, dtype=value.dtype, device=value.device)
        return torch.cat([value, fill.to(value.dtype)], dim=1)

    batch["input_ids"] = extend(ids, pad_token_id)
    if batch.get("labels") is not None:
        batch["labels"] = extend(batch["labels"], IGNORE_INDEX)
    if batch.get("attention_mask") is not None:
        batch["attention_mask"] = extend(batch["attention_mask"], 0)
        if batch.get("position_ids") is not None:  # continue each row's positions over its padding
            last = batch["position_ids"][:, -1:]
            batch["position_ids"] = extend(batch["position_ids"], last + torch.arange(1, pad + 1))
    elif batch.get("position_ids") is not None:
        pos = batch["position_ids"]
        batch["position_ids"] = extend(pos, torch.arange(pad, device=pos.device).expand(pos.shape[0], -1))
        if batch.get("seq_lens") is not None:
            batch["seq_lens"] = torch.cat([batch["seq_lens"], batch["seq_lens"].new_tensor([pad])])
        for key in ("cu_seq_lens_q", "cu_seq_lens_k"):
            if batch.get(key) is not None:
                batch[key] = torch.cat([batch[key], batch[key].new_tensor([length + pad])])
        for key in ("max_length_q", "max_length_k"):
            if key in batch:
                batch[key] = max(int(batch[key]), pad)
    return batch


@dataclass
class PadToMultipleCollator:
    """Run ``collator``, then pad its batch to a multiple of the SP size (``shard_batch`` needs equal shards).

    ``untouched``: entries held out of the padding and put back as they were (a head batch's per-sample
    labels, and its ``seq_lens``, which the pooling reads for the real samples only).
    """

    collator: Callable[[Any], dict[str, Any]]
    multiple: int
    pad_token_id: int
    untouched: tuple[str, ...] = ()

    def __call__(self, samples: Any) -> dict[str, Any]:
        """Collate ``samples`` and pad the result (see :func:`pad_batch_to_multiple`)."""
        batch = self.collator(samples)
        kept = {k: batch.pop(k) for k in self.untouched if k in batch}
        return {**pad_batch_to_multiple(batch, self.multiple, self.pad_token_id), **kept}


def _start(
    model: Any, cfg: Any, options: Mapping[str, Any] | None, training_args: Any, multimodal: bool
) -> tuple[SequenceParallelOptions, Any]:
    """Every check, then the SP process groups: ``(options, state)``. Collective."""
    opts = SequenceParallelOptions.from_options(options)
    check_flags(cfg, multimodal)
    heads = check_model(model, opts)
    check_world(int(training_args.world_size), opts.size)

    import torch.distributed as dist

    if not dist.is_initialized():
        raise SwiftcoreError(
            "--sequence-parallel-size: torch.distributed is not initialised; run under torchrun "
            f"(--nproc-per-node a multiple of {opts.size})"
        )
    from swiftcore_sequence_parallel.groups import init_sequence_parallel, pick_ulysses_size

    ulysses_size = pick_ulysses_size(opts.size, heads) if opts.mode == "hybrid" and heads else None
    return opts, init_sequence_parallel(opts.size, opts.mode, ulysses_size=ulysses_size, ring_impl=opts.ring_impl)


def _pad_id(tokenizer: Any) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0


def setup_sequence_parallel(
    model: Any,
    collator: Callable[[Any], dict[str, Any]],
    cfg: Any,
    options: Mapping[str, Any] | None,
    training_args: Any,
    *,
    tokenizer: Any,
    multimodal: bool = False,
) -> tuple[Callable[..., Any], Callable[[Any], dict[str, Any]]]:
    """Check everything, create the SP groups, switch the model's attention; returns ``(trainer factory, collator)``.

    Collective (every rank calls it, after ``training_args`` set up ``torch.distributed``). The factory takes
    :class:`~swiftcore_train.trainer.SwiftTrainer`'s arguments; the collator pads with the tokenizer's pad id
    (0 when it has none, as the plain sft collator does).

    Raises:
        SwiftcoreError: the world size, model or options do not allow exact sequence-parallel training.
    """
    opts, state = _start(model, cfg, options, training_args, multimodal)
    from swiftcore_sequence_parallel.attention import enable_sequence_parallel
    from swiftcore_sequence_parallel.trainer import SequenceParallelTrainer

    enable_sequence_parallel(model, state)
    factory = functools.partial(SequenceParallelTrainer, sp_state=state)
    return factory, PadToMultipleCollator(collator, opts.size, _pad_id(tokenizer))


def setup_head_sequence_parallel(
    model: Any,
    collator: Any,
    options: Mapping[str, Any] | None,
    training_args: Any,
    *,
    tokenizer: Any,
    trainer_class: type,
) -> tuple[Callable[..., Any], Callable[[Any], dict[str, Any]]]:
    """:func:`setup_sequence_parallel` for a head model (``HeadModel``: a ``decoder`` and a pooled head).

    The decoder computes this rank's shard and hands the pooling the whole sequence
    (:func:`~swiftcore_sequence_parallel.heads.shard_decoder`); ``trainer_class`` (the head recipe's trainer,
    its loss unchanged) gets the per-group data of :class:`~swiftcore_sequence_parallel.trainer.SequenceParallelData`.

    Raises:
        SwiftcoreError: the world size, model or options do not allow exact sequence-parallel training.
    """
    opts, state = _start(model.decoder, None, options, training_args, multimodal=False)
    from swiftcore_sequence_parallel.heads import HEAD_BATCH_KEYS, shard_decoder
    from swiftcore_sequence_parallel.trainer import SequenceParallelData

    shard_decoder(model.decoder, state)
    trainer = type(f"SequenceParallel{trainer_class.__name__}", (SequenceParallelData, trainer_class), {})
    factory = functools.partial(trainer, sp_state=state)
    return factory, PadToMultipleCollator(collator, opts.size, _pad_id(tokenizer), untouched=HEAD_BATCH_KEYS)


def apply_sequence_parallel(setup: Any) -> None:
    """Switch a training run to SP in place: swiftcore-train's ``swiftcore_train_setup`` hook, SP size above 1.

    ``setup`` is swiftcore-train's ``TrainSetup``, read by its fields (this package imports neither the training
    runtime nor swiftcore-heads). ``kind`` ``"sft"``: :func:`setup_sequence_parallel`, whose trainer weights each
    step by tokens over the SP group itself, so the recipe's token-weighted loss is turned off. A head recipe's kind
    (:data:`~swiftcore_sequence_parallel.HEAD_RECIPES`): :func:`setup_head_sequence_parallel` on the head model's
    ``decoder``, the recipe's trainer class keeping its loss. Collective: every rank calls it.

    Raises:
        SwiftcoreError: the recipe, world size, model or options do not allow exact sequence-parallel training.
    """
    if setup.kind == "sft":
        setup.trainer_class, setup.collator = setup_sequence_parallel(
            setup.model,
            setup.collator,
            setup.cfg,
            setup.options,
            setup.training_args,
            tokenizer=setup.tokenizer,
            multimodal=setup.multimodal,
        )
        setup.token_weighted_loss = False
    elif setup.kind in HEAD_RECIPES:
        setup.trainer_class, setup.collator = setup_head_sequence_parallel(
            setup.model,
            setup.collator,
            setup.options,
            setup.training_args,
            tokenizer=setup.tokenizer,
            trainer_class=setup.trainer_class,
        )
    else:
        raise SwiftcoreError(
            f"--sequence-parallel-size: the {setup.kind!r} run does not support sequence parallelism (only sft and "
            f"the head recipes {', '.join(HEAD_RECIPES)}); drop --sequence-parallel-size"
        )
