"""The token-weighted causal-LM loss, for models whose class lets the Trainer average micro-batch losses.

transformers weights a step's loss by label tokens (the count of the whole accumulated step, ``num_items_in_batch``)
only for models that take loss keyword arguments. Classes that set ``accepts_loss_kwargs = False`` (Qwen3.5,
Qwen3.5-MoE and about forty others in transformers 5.19) get the mean of their micro-batches' means instead, so
``--gradient-accumulation-steps 2`` at batch 2 trains a different loss than batch 4 whenever the micro-batches
hold different numbers of label tokens. :func:`token_weighted_loss` gives the Trainer a ``compute_loss_func``
that computes the same loss as the model would, weighted over the whole step.

:class:`ChunkedCausalLMLoss` computes that same loss without materialising the full-vocabulary logits: the model runs
to its last hidden state only (``logits_to_keep=1``, ``output_hidden_states=True``), and the lm_head and the
cross-entropy run over chunks of the supervised tokens (fused with their gradient, or under activation
checkpointing), so neither the forward nor the backward ever holds more than ``chunk_size x vocab`` logits (at vocab
150k and 4k tokens the plain loss holds 2.5 GB of fp32 logits, before their gradient). Liger's
``LigerFusedLinearCrossEntropyLoss`` does the same fused on GPU, but it is Triton-only (no CPU path), so this is plain
torch and runs everywhere.
"""

from __future__ import annotations

import functools
import inspect
import logging
from typing import Any

from swiftcore.api import SwiftcoreError

__all__ = ["DEFAULT_LOSS_CHUNK_SIZE", "ChunkedCausalLMLoss", "causal_lm_loss", "sft_loss", "token_weighted_loss"]

log = logging.getLogger("swiftcore.train")

#: Supervised tokens per lm_head + cross-entropy chunk (``--loss-chunk-size``): 1024 x 150k fp32 logits are 0.6 GB.
DEFAULT_LOSS_CHUNK_SIZE = 1024


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


def _aux_loss_coef(config: Any) -> float:
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    routed = getattr(text, "output_router_logits", False)
    return float(getattr(text, "router_aux_loss_coef", 0.0) or 0.0) if routed else 0.0


class ChunkedCausalLMLoss:
    """:func:`causal_lm_loss` from the model's last hidden state, the lm_head applied chunk by chunk.

    Only the supervised positions (shifted label ``!= -100``) go through the lm_head, ``chunk_size`` at a time, so
    peak memory grows with ``chunk_size x vocab`` instead of ``tokens x vocab``. A plain ``nn.Linear`` head (no
    bias, no adapter: full training, or LoRA that leaves the lm_head alone) takes the fused path: each chunk's
    gradients (of the hidden states and the head weight) are computed in the forward, the softmax turned into its
    gradient in place, so nothing is recomputed and a chunk costs about one ``chunk_size x vocab`` buffer. Any other
    head (LoRA on the lm_head, a bias) runs each chunk under ``torch.utils.checkpoint`` instead (its logits are
    recomputed in the backward, through whatever the head module does). The reduction is the plain loss's: the sum over
    supervised tokens divided by ``num_items_in_batch`` (the whole accumulated step's count) when given, else by
    this batch's count; ``final_logit_softcapping`` is applied as the model applies it, before the fp32 upcast.

    Args:
        head: the output embedding (``model.get_output_embeddings()``: the lm_head, tied or not, LoRA-wrapped or not).
        chunk_size: supervised tokens per chunk (at least 1).
        softcap: the text config's ``final_logit_softcapping`` (None: none).
        aux_loss_coef: weight of the router auxiliary loss the model returns (0: not added).

    Called as a Trainer ``compute_loss_func``: ``loss(outputs, labels, num_items_in_batch=None)``, where ``outputs``
    come from a forward with :attr:`forward_kwargs` added (:class:`~swiftcore_train.trainer.SwiftTrainer` adds them).
    """

    #: What the model's forward is called with: logits for one position only, and the hidden states.
    forward_kwargs = {"logits_to_keep": 1, "output_hidden_states": True}

    def __init__(self, head: Any, chunk_size: int, *, softcap: float | None = None, aux_loss_coef: float = 0.0):
        self.head, self.chunk_size, self.softcap, self.aux_loss_coef = head, int(chunk_size), softcap, aux_loss_coef

    def _chunk(self, hidden: Any, target: Any) -> Any:
        import torch.nn.functional as F

        logits = self.head(hidden)
        if self.softcap is not None:  # as the model's forward does it, in the model's dtype
            logits = (logits / self.softcap).tanh() * self.softcap
        return F.cross_entropy(logits.float(), target, reduction="sum")

    def __call__(self, outputs: Any, labels: Any, num_items_in_batch: Any = None) -> Any:
        """The step's loss (see the class docstring) for ``labels`` ``[batch, tokens]``, ``-100`` ignored."""
        import torch
        import torch.nn.functional as F
        from torch.utils.checkpoint import checkpoint

        states = outputs.get("hidden_states") if hasattr(outputs, "get") else None
        if not states:
            raise SwiftcoreError(
                "--loss-chunk-size: the model returned no hidden states with output_hidden_states=True, so the "
                "chunked loss cannot run on it; pass --loss-chunk-size 0 (the plain loss)"
            )
        hidden = states[-1]  # transformers ties hidden_states[-1] to last_hidden_state (after the final norm)
        shift = F.pad(labels, (0, 1), value=-100)[..., 1:].to(hidden.device)
        keep = shift != -100
        hidden, target = hidden[keep], shift[keep]
        if type(self.head) is torch.nn.Linear and self.head.bias is None:
            weight = self.head.weight
            if torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad):
                total = _fused_function().apply(hidden, weight, target, self.chunk_size, self.softcap)
            else:  # evaluation: no gradient to compute along
                total = _fused_chunks(hidden, weight, target, self.chunk_size, self.softcap, False)[0]
        else:
            total = hidden.new_zeros((), dtype=torch.float32)
            for start in range(0, target.shape[0], self.chunk_size):
                end = start + self.chunk_size
                total = total + checkpoint(self._chunk, hidden[start:end], target[start:end], use_reentrant=False)
        count = num_items_in_batch if num_items_in_batch is not None else keep.sum()
        loss = total / (count.to(total.device) if torch.is_tensor(count) else count)
        aux = outputs.get("aux_loss")
        if aux is not None and self.aux_loss_coef:
            loss = loss + self.aux_loss_coef * aux.to(loss.device)
        return loss


def _fused_chunks(
    hidden: Any, weight: Any, target: Any, chunk_size: int, softcap: float | None, grads: bool
) -> tuple[Any, Any, Any]:
    """Summed cross-entropy of ``hidden @ weight.T`` (softcapped) against ``target``, chunk by chunk; with ``grads``,
    also its gradients with respect to ``hidden`` and ``weight`` (fp32), computed chunk by chunk as it goes."""
    import torch
    import torch.nn.functional as F

    total = torch.zeros((), dtype=torch.float32, device=hidden.device)
    grad_hidden: Any = torch.empty_like(hidden) if grads else None
    grad_weight: Any = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if grads else None
    for start in range(0, target.shape[0], chunk_size):
        h, y = hidden[start : start + chunk_size], target[start : start + chunk_size]
        logits = F.linear(h, weight)  # what the lm_head computes, in its dtype (autocast included)
        capped = None
        if softcap is not None:  # as the model's forward does it, in the model's dtype
            capped = (logits / softcap).tanh()
            logits = capped * softcap
        z = logits.float()  # the plain loss's upcast (the same tensor in float32)
        lse = z.logsumexp(-1)
        total += (lse - z.gather(1, y[:, None]).squeeze(1)).sum()
        if grads:
            g = z.sub_(lse[:, None]).exp_()  # softmax, in place of the logits: d loss / d logits = softmax - onehot
            g[torch.arange(y.shape[0], device=y.device), y] -= 1
            if capped is not None:
                g.mul_(1 - capped.float().square())  # d (c tanh(l / c)) / d l
            g = g.to(logits.dtype)
            grad_hidden[start : start + chunk_size] = g @ weight
            grad_weight += (g.t() @ h).float()
            del g
        del logits, z, capped  # before the next chunk's logits exist: one chunk's buffers at a time
    return total, grad_hidden, grad_weight


@functools.cache
def _fused_function() -> Any:
    """The autograd Function of the fused path: the gradients computed in the forward, scaled in the backward.

    Hand-written because Liger's ``LigerFusedLinearCrossEntropyLoss`` (the same idea, fused further) runs Triton
    kernels only, with no CPU path; on GPU it would be the library to use.
    """
    import torch

    class FusedLinearCrossEntropy(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, hidden: Any, weight: Any, target: Any, chunk_size: int, softcap: Any) -> Any:
            grads = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
            total, grad_hidden, grad_weight = _fused_chunks(hidden, weight, target, chunk_size, softcap, grads)
            ctx.save_for_backward(grad_hidden, grad_weight)
            ctx.weight_dtype = weight.dtype
            return total

        @staticmethod
        def backward(ctx: Any, grad_total: Any) -> Any:
            grad_hidden, grad_weight = ctx.saved_tensors
            scale = grad_total.float()
            return (
                (grad_hidden * scale).to(grad_hidden.dtype) if ctx.needs_input_grad[0] else None,
                (grad_weight * scale).to(ctx.weight_dtype) if ctx.needs_input_grad[1] else None,
                None,
                None,
                None,
            )

    return FusedLinearCrossEntropy


def sft_loss(trainer: Any, chunk_size: int = DEFAULT_LOSS_CHUNK_SIZE, *, multimodal: bool = False) -> Any:
    """The ``compute_loss_func`` the ``sft`` recipe sets on ``trainer``: :class:`ChunkedCausalLMLoss` when
    ``chunk_size`` > 0 and the model allows it, else :func:`token_weighted_loss`'s (None: the model's own loss).

    Where the chunked loss cannot apply it falls back to the plain loss and logs why: image/audio batches
    (extra model outputs), FSDP / DeepSpeed (the lm_head's weight is sharded outside the forward), label smoothing,
    an encoder-decoder model, or a model whose forward takes no ``logits_to_keep`` or has no output embedding.

    Raises:
        SwiftcoreError: ``chunk_size`` is negative.
    """
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 0:
        raise SwiftcoreError(
            f"--loss-chunk-size: {chunk_size!r} must be 0 (the plain loss) or a positive number of tokens"
        )
    model = trainer.model
    config = model.config
    reason = None
    if not chunk_size:
        reason = "as asked (--loss-chunk-size 0)"
    elif trainer.compute_loss_func is not None:
        reason = "the trainer already has its own loss function"
    elif config.is_encoder_decoder:
        reason = "an encoder-decoder model"
    elif multimodal:
        reason = "image or audio batches"
    elif trainer.is_fsdp_enabled or trainer.is_deepspeed_enabled:
        reason = "with --fsdp / --deepspeed"
    elif trainer.args.label_smoothing_factor:
        reason = "with label smoothing"
    else:
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        head = base.get_output_embeddings()
        if head is None or getattr(head, "weight", None) is None or head.weight.dim() != 2:
            reason = f"{type(base).__name__} has no lm_head"
        elif "logits_to_keep" not in inspect.signature(base.forward).parameters:
            reason = f"{type(base).__name__}.forward takes no logits_to_keep"
    if reason is not None:
        log.info("loss: plain (full-vocabulary logits), %s", reason)  # once: a recipe asks once per run
        return token_weighted_loss(trainer)
    log.info("loss: chunked lm_head + cross-entropy, %d supervised tokens per chunk (--loss-chunk-size)", chunk_size)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return ChunkedCausalLMLoss(
        head,
        int(chunk_size),
        softcap=getattr(text, "final_logit_softcapping", None),
        aux_loss_coef=_aux_loss_coef(config),
    )


def token_weighted_loss(trainer: Any) -> Any:
    """A ``compute_loss_func`` for ``trainer`` when its model does not weight the step by tokens itself, else None.

    Read after the Trainer is built: its ``model_accepts_loss_kwargs`` is transformers' own decision.
    """
    config = trainer.model.config
    if trainer.model_accepts_loss_kwargs or trainer.compute_loss_func is not None or config.is_encoder_decoder:
        return None  # weighted already, or not a decoder-only model (its loss is not the shifted causal one)
    return functools.partial(causal_lm_loss, aux_loss_coef=_aux_loss_coef(config))
