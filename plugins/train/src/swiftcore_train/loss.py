"""The token-weighted causal-LM loss, for models whose class lets the Trainer average micro-batch losses.

transformers weights a step's loss by label tokens (the count of the whole accumulated step, ``num_items_in_batch``)
only for models that take loss keyword arguments. Classes that set ``accepts_loss_kwargs = False`` (Qwen3.5,
Qwen3.5-MoE and about forty others in transformers 5.19) get the mean of their micro-batches' means instead, so
``--gradient-accumulation-steps 2`` at batch 2 trains a different loss than batch 4 whenever the micro-batches
hold different numbers of label tokens. :func:`token_weighted_loss` gives the Trainer a ``compute_loss_func``
that computes the same loss as the model would, weighted over the whole step.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["causal_lm_loss", "token_weighted_loss"]


def causal_lm_loss(outputs: Any, labels: Any, num_items_in_batch: Any = None, *, aux_loss_coef: float = 0.0) -> Any:
    """transformers' causal-LM loss of ``outputs.logits`` (shifted labels, ``-100`` ignored), summed and divided by
    ``num_items_in_batch`` when given (else the batch's mean), plus the router auxiliary loss the model added to
    its own loss (``aux_loss_coef * outputs.aux_loss``, when the model returned one)."""
    from transformers.loss.loss_utils import ForCausalLMLoss

    logits = outputs["logits"]
    loss = ForCausalLMLoss(logits, labels, logits.shape[-1], num_items_in_batch=num_items_in_batch)
    aux = outputs.get("aux_loss") if hasattr(outputs, "get") else None
    if aux is not None and aux_loss_coef:
        loss = loss + aux_loss_coef * aux.to(loss.device)
    return loss


def token_weighted_loss(trainer: Any) -> Any:
    """A ``compute_loss_func`` for ``trainer`` when its model does not weight the step by tokens itself, else None.

    Read after the Trainer is built: its ``model_accepts_loss_kwargs`` is transformers' own decision.
    """
    config = trainer.model.config
    if trainer.model_accepts_loss_kwargs or trainer.compute_loss_func is not None or config.is_encoder_decoder:
        return None  # weighted already, or not a decoder-only model (its loss is not the shifted causal one)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    routed = getattr(text, "output_router_logits", False)
    coef = float(getattr(text, "router_aux_loss_coef", 0.0) or 0.0) if routed else 0.0
    return functools.partial(causal_lm_loss, aux_loss_coef=coef)
