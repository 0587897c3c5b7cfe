"""Sequence parallelism for the head recipes (embedding, reranker, classification): shard inside the decoder.

A head model (``swiftcore_heads.model.HeadModel``) pools one vector per sample from its decoder's last hidden
states, so the split has to end before the pooling. :func:`shard_decoder` puts two hooks on the decoder:

* before its forward, the whole batch's ``input_ids`` / ``attention_mask`` / ``position_ids`` are cut to this
  rank's shard (:func:`~swiftcore_sequence_parallel.sharding.shard_batch`; global position ids, so rotary
  embeddings and packed-sample boundaries stay right); the packed-row metadata of the flash-attention path is
  dropped (the SP attention rebuilds the layout from the global position ids);
* after it, the shards' ``last_hidden_state`` are all-gathered along the sequence (differentiable).

Everything after the decoder (pooling, score layer, loss) then runs on the whole sequence, the same on every
rank of the group. Why the gradients come out exact under DDP: the gather's backward is a reduce-scatter
(the sum over the ``N`` ranks of identical gradients, so ``N`` times this shard's part), hence the decoder's
gradient on each rank is ``N`` times its shard's share, and DDP's mean over the ``N`` ranks is their sum: the
one-process gradient. The head after the gather gets the same full gradient on every rank, which the mean
leaves as it is. With data-parallel groups on top, the mean over the groups is plain DDP's.

Nothing here imports torch at module level.
"""

from __future__ import annotations

from typing import Any

__all__ = ["HEAD_BATCH_KEYS", "shard_decoder"]

#: Entries of a head batch that are not laid out along the sequence (per-sample labels, group sizes) or that
#: must keep describing the real samples only (``seq_lens``, read by the pooling): never padded by the SP
#: collator.
HEAD_BATCH_KEYS = ("labels", "n_groups", "group_size", "seq_lens")
#: Decoder keyword arguments describing the whole packed row (flash-attention varlen metadata): wrong for a
#: shard, and unused by the SP attention.
_WHOLE_ROW_KWARGS = ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")
_HOOKED = "_swiftcore_sp_sharded"


def _shard_inputs(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Decoder pre-hook: the whole batch in, this rank's shard (global position ids) out."""
    from swiftcore_sequence_parallel.groups import get_sequence_parallel_state
    from swiftcore_sequence_parallel.sharding import shard_batch

    state = get_sequence_parallel_state()
    if args:
        raise TypeError(
            "sequence-parallel heads: call the decoder with keyword arguments (input_ids=..., position_ids=...)"
        )
    if kwargs.get("inputs_embeds") is not None:
        raise ValueError("sequence-parallel heads: inputs_embeds are not supported; pass input_ids")
    kwargs = {k: v for k, v in kwargs.items() if k not in _WHOLE_ROW_KWARGS}
    whole = {k: kwargs.pop(k) for k in ("input_ids", "attention_mask", "position_ids") if k in kwargs}
    return args, {**kwargs, **shard_batch(whole, state.rank, state.size), "use_cache": False}


def _gather_hidden(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> Any:
    """Decoder forward hook: this shard's ``last_hidden_state`` out, the whole sequence's (differentiable) in."""
    from swiftcore_sequence_parallel.comm import all_gather
    from swiftcore_sequence_parallel.groups import get_sequence_parallel_state

    output["last_hidden_state"] = all_gather(output["last_hidden_state"], get_sequence_parallel_state().group, dim=1)
    return output


def shard_decoder(decoder: Any, state: Any = None) -> Any:
    """Make ``decoder`` compute this rank's shard and return the whole sequence's last hidden states.

        Also switches its attention (and Qwen3.5's gated DeltaNet layers) to sequence parallelism
        (:func:`~swiftcore_sequence_parallel.attention.enable_sequence_parallel`). The batch it is called with
        must be padded to a multiple of ``state.size`` (the SP collator does). Calling it again (e.g. for another
    mode) switches the attention again but adds no second pair of hooks.

        Args:
            decoder: the text model (``last_hidden_state`` in its output), e.g. ``HeadModel.decoder``.
            state: the :class:`~swiftcore_sequence_parallel.groups.SequenceParallelState` whose mode the attention
                takes (default: the active one); the hooks, like the attention, use the state active when they run.

        Returns:
            The decoder.
    """
    from swiftcore_sequence_parallel.attention import enable_sequence_parallel

    enable_sequence_parallel(decoder, state)
    if getattr(decoder, _HOOKED, False):
        return decoder
    # First of the pre-hooks: the gated DeltaNet layout hook enable_sequence_parallel added must see the shard.
    decoder.register_forward_pre_hook(_shard_inputs, with_kwargs=True, prepend=True)
    decoder.register_forward_hook(_gather_hidden, with_kwargs=True)
    setattr(decoder, _HOOKED, True)
    return decoder
