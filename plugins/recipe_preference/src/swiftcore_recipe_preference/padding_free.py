"""``--padding-free`` for DPO and KTO: each padded batch TRL builds runs as one packed row.

Why here and not TRL's own ``padding_free``: TRL 1.16's DPOTrainer switches it off ("temporarily unavailable
after a refactor") and its KTOTrainer has none. Both trainers reach the model only through the fused-LM-head
forward (``model(input_ids, attention_mask, labels, fused_lm_head=True).log_probs``, ``[rows, len - 1]``), for
the policy, the reference and the KL pass alike. :func:`pack_fused_forward` wraps that forward: the real tokens
of the padded rows are concatenated into one row with per-sequence ``position_ids`` and flash-attention's
``cu_seq_lens_*`` (what :class:`swiftcore_data.PaddingFreeCollator` gives SFT), the model runs on that, and the
per-token outputs are laid back out as the padded rows TRL reads. TRL's loss code runs unchanged; no compute
is spent on padding. A model on sdpa switches to :mod:`swiftcore_data.packed_attention` (each sample's span on
its own, as for SFT) rather than sdpa under a block-diagonal mask over the whole row; flash-attention uses
``cu_seq_lens``, eager the mask transformers builds from ``position_ids``. A family whose layers mix tokens
otherwise patches them at load (:mod:`swiftcore_data.packed_layers`), as for SFT.
"""

from __future__ import annotations

from typing import Any

__all__ = ["pack_fused_forward", "pack_trainer_models"]

#: Per-token fields of TRL's ``FusedCausalLMOutput`` (``[rows, len - 1]``), laid back out as padded rows.
_PER_TOKEN = ("log_probs", "entropy", "log_sum_sq_probs", "mean_logits", "is_top1", "label_mask")


def pack_fused_forward(model: Any) -> None:
    """Make ``model``'s fused-LM-head forward (TRL's ``add_fused_lm_head``) run padded batches packed.

    Calls without ``fused_lm_head=True`` (generation, an ordinary forward) or without an attention mask pass
    through unchanged. Each row's real tokens must be contiguous (left or right padding), as TRL's collators
    make them. A model on sdpa gets :func:`~swiftcore_data.packed_attention.use_packed_attention`.
    """
    import torch
    from swiftcore_data import use_packed_attention

    use_packed_attention(model)

    fused = model.forward

    def forward(*args: Any, fused_lm_head: bool = False, **kwargs: Any) -> Any:
        mask = kwargs.get("attention_mask")
        if not fused_lm_head or mask is None or args or mask.dim() != 2:
            return fused(*args, fused_lm_head=fused_lm_head, **kwargs)
        keep = mask.bool()
        input_ids, labels = kwargs.pop("input_ids"), kwargs.pop("labels")
        del kwargs["attention_mask"]
        lengths = keep.sum(dim=1)
        cu = torch.zeros(len(lengths) + 1, dtype=torch.int32, device=input_ids.device)
        cu[1:] = lengths.cumsum(0)
        packed_labels = labels[keep].clone()
        packed_labels[cu[:-1].long()] = -100  # a row's first token is no one's next token
        position_ids = torch.cat([torch.arange(int(n), device=input_ids.device) for n in lengths])
        longest = int(lengths.max())
        out = fused(
            input_ids=input_ids[keep][None],
            labels=packed_labels[None],
            position_ids=position_ids[None],
            cu_seq_lens_q=cu,
            cu_seq_lens_k=cu,
            max_length_q=longest,
            max_length_k=longest,
            fused_lm_head=True,
            **kwargs,
        )
        # Packed position t predicts token t + 1; a row's last token predicts the next row's first: dropped.
        within = torch.ones(int(cu[-1]) - 1, dtype=torch.bool, device=input_ids.device)
        within[(cu[1:-1] - 1).long()] = False
        pairs = keep[:, 1:] & keep[:, :-1]  # padded (row, j): token j + 1 of that row follows token j
        for name in _PER_TOKEN:
            value = getattr(out, name, None)
            if value is not None:
                setattr(out, name, value.new_zeros(pairs.shape).masked_scatter(pairs, value[0][within]))
        return out

    model.forward = forward


def pack_trainer_models(trainer: Any) -> None:
    """Apply :func:`pack_fused_forward` to what a TRL DPO/KTO trainer scores with: the policy's model (under its
    peft wrapper, where TRL put the fused head) and a separate reference model, if any."""
    policy = trainer.model.get_base_model() if hasattr(trainer.model, "get_base_model") else trainer.model
    pack_fused_forward(policy)
    if getattr(trainer, "ref_model", None) is not None:
        pack_fused_forward(trainer.ref_model)
