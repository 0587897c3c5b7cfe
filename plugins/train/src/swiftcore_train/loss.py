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

:func:`chunked_token_logps` is the same chunking for the log-probability of each selected token (and its entropy),
the quantity DPO, KTO and GRPO are built from: ``chunk_size`` tokens' full-vocabulary logits at a time, recomputed
in the backward. :func:`use_chunked_lm_head` puts it under TRL's fused-LM-head forward (``fused_lm_head=True``),
whose own kernel on CPU folds tiles of 4,096 tokens x 32,768 vocabulary columns through several fp32 temporaries
each (see ``bench/chunked_loss_memory.py`` for what each costs).
"""

from __future__ import annotations

import functools
import inspect
import logging
from typing import Any

from swiftcore.api import SwiftcoreError

__all__ = [
    "DEFAULT_LOSS_CHUNK_SIZE",
    "ChunkedCausalLMLoss",
    "causal_lm_loss",
    "chunked_token_logps",
    "label_logps",
    "sft_loss",
    "token_weighted_loss",
    "trainer_head_reason",
    "use_chunked_lm_head",
]

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


#: The per-token fields of TRL's fused-LM-head output, in its order; ``log_probs`` is always computed.
TOKEN_OUTPUTS = ("log_probs", "entropy", "log_sum_sq_probs", "mean_logits", "is_top1")


def _token_logits(h: Any, weight: Any, dtype: Any, softcap: float | None, temperature: float) -> tuple[Any, Any]:
    """``(z, capped)``: one chunk's fp32 logits, softcapped and divided by ``temperature`` as TRL's fused head does
    (the projection in ``dtype``, the rest in float32 or wider); ``capped`` is ``tanh(logits / softcap)`` (None: no
    cap)."""
    import torch
    import torch.nn.functional as F

    z = F.linear(h.to(dtype), weight.to(dtype))
    z = z.to(torch.promote_types(z.dtype, torch.float32))
    capped = None
    if softcap is not None:
        capped = (z / softcap).tanh()
        z = capped * softcap
    if temperature != 1.0:
        z = z / temperature
    return z, capped


def _token_chunks(
    hidden: Any, weight: Any, target: Any, chunk_size: int, dtype: Any, softcap: Any, temperature: float, wanted: Any
) -> list[Any]:
    """The forward of :func:`chunked_token_logps`: ``[log_probs, lse, entropy, log_sum_sq_probs, mean_logits,
    is_top1]`` (None where not ``wanted``), chunk by chunk."""
    import torch

    n = target.shape[0]
    f32 = {"dtype": torch.promote_types(dtype, torch.float32), "device": hidden.device}
    logps, lse = torch.empty(n, **f32), torch.empty(n, **f32)
    extra = {k: torch.empty(n, **f32) for k in ("entropy", "log_sum_sq_probs", "mean_logits") if k in wanted}
    top1 = torch.empty(n, dtype=torch.bool, device=hidden.device) if "is_top1" in wanted else None
    for start in range(0, n, chunk_size):
        end = min(start + chunk_size, n)
        y = target[start:end]
        z, _ = _token_logits(hidden[start:end], weight, dtype, softcap, temperature)
        if "mean_logits" in extra:
            extra["mean_logits"][start:end] = z.mean(-1)
        if top1 is not None:
            top1[start:end] = z.argmax(-1) == y  # the first maximum, as TRL counts a tie
        norm = z.logsumexp(-1)
        lse[start:end] = norm
        logps[start:end] = z.gather(1, y[:, None]).squeeze(1) - norm
        z = z.sub_(norm[:, None])  # log-softmax, in place of the logits
        if "log_sum_sq_probs" in extra:
            extra["log_sum_sq_probs"][start:end] = z.mul(2).logsumexp(-1)
        if "entropy" in extra:
            extra["entropy"][start:end] = z.exp().mul_(z).sum(-1).neg_()
        del z
    return [logps, lse, extra.get("entropy"), extra.get("log_sum_sq_probs"), extra.get("mean_logits"), top1]


@functools.cache
def _token_logps_function() -> Any:
    """The autograd Function of :func:`chunked_token_logps`: a chunk's logits are recomputed in the backward."""
    import torch

    class ChunkedTokenLogps(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, hidden: Any, weight: Any, target: Any, chunk_size: int, softcap: Any,
                    temperature: float, wanted: tuple[str, ...]) -> Any:  # fmt: skip
            ctx.set_materialize_grads(False)
            device = hidden.device.type
            dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else hidden.dtype
            logps, lse, entropy, sq, mean, top1 = _token_chunks(
                hidden, weight, target, chunk_size, dtype, softcap, temperature, wanted
            )
            ctx.save_for_backward(hidden, weight, target, lse, lse if entropy is None else entropy)
            ctx.settings = (chunk_size, dtype, softcap, temperature)
            ctx.mark_non_differentiable(*(x for x in (sq, mean, top1) if x is not None))
            return logps, entropy, sq, mean, top1

        @staticmethod
        def backward(ctx: Any, grad_logps: Any, grad_entropy: Any, *_: Any) -> Any:
            hidden, weight, target, lse, entropy = ctx.saved_tensors
            chunk_size, dtype, softcap, temperature = ctx.settings
            want_hidden, want_weight = ctx.needs_input_grad[:2]
            wide = {"dtype": torch.promote_types(dtype, torch.float32), "device": hidden.device}
            grad_hidden = torch.zeros(hidden.shape, **wide) if want_hidden else None
            grad_weight = torch.zeros(weight.shape, **wide) if want_weight else None
            if grad_logps is None and grad_entropy is None:
                return None, None, None, None, None, None, None
            for start in range(0, target.shape[0], chunk_size):
                end = min(start + chunk_size, target.shape[0])
                h = hidden[start:end].to(dtype)
                z, capped = _token_logits(h, weight, dtype, softcap, temperature)
                log_p = z.sub_(lse[start:end, None])
                # d log p_y / dz_j = 1[j = y] - p_j and d H / dz_j = -p_j (log p_j + H), so with the incoming
                # gradients a (log-probs) and b (entropy): g_j = a 1[j = y] - p_j (a + b (log p_j + H)), built in
                # place: one chunk x vocab buffer (two with an entropy gradient)
                gl = torch.zeros(end - start, dtype=z.dtype, device=z.device)
                if grad_logps is not None:
                    gl = grad_logps[start:end].to(z.dtype)
                if grad_entropy is not None:
                    p = log_p.exp()
                    ge = grad_entropy[start:end].to(z.dtype)
                    weight_p = log_p.add_(entropy[start:end, None]).mul_(ge[:, None]).add_(gl[:, None])
                    g = p.mul_(weight_p).neg_()
                    del weight_p
                else:
                    g = log_p.exp_().mul_(-gl[:, None])
                del log_p, z
                g[torch.arange(end - start, device=g.device), target[start:end]] += gl
                if temperature != 1.0:
                    g.div_(temperature)
                if capped is not None:
                    g.mul_(1 - capped.square())  # d (c tanh(l / c)) / d l
                g = g.to(dtype)
                if grad_hidden is not None:
                    grad_hidden[start:end] = g @ weight.to(dtype)
                if grad_weight is not None:
                    grad_weight += g.t() @ h
                del g, capped
            return (
                grad_hidden.to(hidden.dtype) if grad_hidden is not None else None,
                grad_weight.to(weight.dtype) if grad_weight is not None else None,
                None, None, None, None, None,
            )  # fmt: skip

    return ChunkedTokenLogps


def chunked_token_logps(
    hidden: Any,
    weight: Any,
    target: Any,
    chunk_size: int,
    *,
    softcap: float | None = None,
    temperature: float = 1.0,
    outputs: tuple[str, ...] = ("log_probs",),
) -> tuple[Any, Any, Any, Any, Any]:
    """Each token's ``log softmax(logits)[target]`` for ``logits = softcap(hidden @ weight.T) / temperature``,
    ``chunk_size`` tokens at a time: the full ``tokens x vocab`` logits never exist, in the forward or the backward
    (which recomputes each chunk's logits and turns them into their gradient).

    Args:
        hidden: ``[tokens, hidden]`` the last hidden states of the scored positions.
        weight: ``[vocab, hidden]`` the lm_head's weight (no bias).
        target: ``[tokens]`` the token whose log-probability each position gets.
        chunk_size: tokens per chunk (at least 1).
        softcap: the model's ``final_logit_softcapping`` (None: none).
        temperature: the sampling temperature the logits are divided by.
        outputs: besides ``log_probs``, any of ``entropy`` (differentiable), ``log_sum_sq_probs``, ``mean_logits``,
            ``is_top1`` (TRL's fused-head fields, without gradient).

    Returns:
        ``(log_probs, entropy, log_sum_sq_probs, mean_logits, is_top1)``, each ``[tokens]`` (float32; bool for
        ``is_top1``), None for a field not in ``outputs``.
    """
    unknown = set(outputs) - set(TOKEN_OUTPUTS)
    if unknown or chunk_size < 1:
        raise SwiftcoreError(f"chunked_token_logps: chunk_size {chunk_size} (>= 1), outputs {sorted(unknown)} unknown")
    return _token_logps_function().apply(
        hidden, weight, target, int(chunk_size), softcap, float(temperature), tuple(outputs)
    )


def _chunked_output_class() -> Any:
    from dataclasses import dataclass

    from transformers.utils import ModelOutput

    @dataclass
    class ChunkedLMHeadOutput(ModelOutput):
        """TRL's ``FusedCausalLMOutput`` fields, from :func:`chunked_token_logps`."""

        loss: Any = None
        log_probs: Any = None
        entropy: Any = None
        log_sum_sq_probs: Any = None
        mean_logits: Any = None
        is_top1: Any = None
        label_mask: Any = None
        aux_loss: Any = None

    return ChunkedLMHeadOutput


def _head_reason(model: Any, chunk_size: int) -> str | None:
    """Why :func:`use_chunked_lm_head` leaves ``model``'s TRL fused head alone (None: it can take over)."""
    config = model.config
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    head = model.get_output_embeddings()
    scales = ("logit_scale", "output_multiplier", "lm_head_multiplier", "logits_scaling")
    if not chunk_size:
        return "as asked (--loss-chunk-size 0)"
    if head is None or getattr(head, "weight", None) is None or head.weight.dim() != 2:
        return f"{type(model).__name__} has no lm_head"
    if getattr(head, "bias", None) is not None:
        return "its lm_head has a bias"
    if hasattr(text, "output_router_logits") and _router_aux_loss(model) is None:
        return "a MoE model whose load-balancing loss has no transformers function to compute it from the router logits"
    if any(getattr(text, k, None) is not None for k in scales):
        return f"{type(text).__name__} scales its logits"
    if not hasattr(model, "base_model"):
        return f"{type(model).__name__} has no base_model"
    return None


def _router_aux_loss(model: Any) -> Any:
    """``loss(router_logits, attention_mask)``: the load-balancing loss ``model``'s own forward returns as
    ``aux_loss`` (the ``load_balancing_loss_func`` of its modeling module, with the expert count and top-k it passes),
    for a forward that went to the base model only (:func:`use_chunked_lm_head`); None where the module has none."""
    import sys

    config = model.config
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    function = getattr(sys.modules.get(type(model).__module__), "load_balancing_loss_func", None)
    # the causal LMs pass their own num_experts / num_experts_per_tok; a multimodal wrapper its text config's
    experts = getattr(model, "num_experts", None) or getattr(text, "num_experts", None)
    top_k = getattr(model, "num_experts_per_tok", None) or getattr(text, "num_experts_per_tok", None)
    if function is None or not experts or not top_k:
        return None
    return lambda router_logits, attention_mask: function(router_logits, experts, top_k, attention_mask)


def trainer_head_reason(trainer: Any) -> str | None:
    """Why a TRL trainer keeps its models' fused LM head whatever the model (None: :func:`use_chunked_lm_head` may
    take over, the model permitting): ``--fsdp`` / ``--deepspeed`` wrap the model the head would reach into;
    ``--fp32-lm-head`` is TRL's own head. (A MoE load-balancing loss TRL adds from the forward's ``aux_loss``, its
    ``aux_loss_enabled``, the chunked head computes as the model does.)"""
    if trainer.is_fsdp_enabled or trainer.is_deepspeed_enabled:
        return "with --fsdp / --deepspeed"
    if getattr(trainer.args, "cast_lm_head_to_fp32", False):
        return "with --fp32-lm-head"
    return None


def use_chunked_lm_head(
    model: Any,
    chunk_size: int = DEFAULT_LOSS_CHUNK_SIZE,
    *,
    temperature: float = 1.0,
    outputs: tuple[str, ...] = ("log_probs",),
    reason: str | None = None,
) -> bool:
    """Make ``model``'s TRL fused-LM-head forward (``model(..., labels=, fused_lm_head=True)``, which TRL's
    ``add_fused_lm_head`` added) score the labels with :func:`chunked_token_logps`, ``chunk_size`` tokens at a time.

    What TRL's forward returns stays the same (``log_probs``, ``entropy``, ... zero where the label is -100,
    ``label_mask``, ``loss``, and with ``output_router_logits=True`` a MoE model's ``aux_loss``, computed from the
    router logits as the model's own forward computes it): TRL's loss code runs unchanged. Calls without
    ``fused_lm_head=True`` (generation), with pre-shifted ``shift_labels`` (context parallelism) or while the lm_head
    is wrapped (LoRA on the head) go to TRL's forward. Returns False, logging why, where the model keeps TRL's head:
    ``chunk_size`` 0, a caller's ``reason`` (``--fsdp``, an fp32 head), an lm_head with a bias, a MoE model whose
    modeling module has no load-balancing function, or one that scales its logits.

    Args:
        model: the model TRL patched (under any peft wrapper: ``get_base_model()``).
        chunk_size: ``--loss-chunk-size``: tokens per chunk (0: TRL's head).
        temperature: the temperature TRL's head was added with.
        outputs: the fields TRL's head was added with (:data:`TOKEN_OUTPUTS`).
        reason: a reason of the caller's to keep TRL's head (None: none).

    Raises:
        SwiftcoreError: ``chunk_size`` is negative.
    """
    import torch

    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 0:
        raise SwiftcoreError(f"--loss-chunk-size: {chunk_size!r} must be 0 (TRL's head) or a positive number of tokens")
    reason = reason or _head_reason(model, chunk_size)
    if reason is not None:
        log.info("log-probs: TRL's fused lm_head (%s: %s)", type(model).__name__, reason)
        return False
    log.info("log-probs: chunked lm_head, %d tokens per chunk (--loss-chunk-size)", chunk_size)
    text = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    softcap = getattr(text, "final_logit_softcapping", None)
    fused, output_class, router_aux_loss = model.forward, _chunked_output_class(), _router_aux_loss(model)

    @functools.wraps(fused)
    def forward(*args: Any, fused_lm_head: bool = False, labels: Any = None, shift_labels: Any = None,
                num_items_in_batch: Any = None, **kwargs: Any) -> Any:  # fmt: skip
        head = model.get_output_embeddings()
        if not fused_lm_head or shift_labels is not None or type(head) is not torch.nn.Linear:
            return fused(*args, fused_lm_head=fused_lm_head, labels=labels, shift_labels=shift_labels,
                         num_items_in_batch=num_items_in_batch, **kwargs)  # fmt: skip
        fields, mask, base = _scored_labels(model, labels, chunk_size, softcap, temperature, outputs, args, kwargs)
        count = mask.sum().clamp(min=1) if num_items_in_batch is None else num_items_in_batch
        loss = -fields[0].sum() / count
        aux = None
        if kwargs.get("output_router_logits") and router_aux_loss is not None:  # TRL asks for it: aux_loss_enabled
            aux = router_aux_loss(base.router_logits, kwargs.get("attention_mask"))
        return output_class(loss, *fields, label_mask=mask, aux_loss=aux)

    model.forward = forward
    return True


def _scored_labels(
    model: Any, labels: Any, chunk_size: int, softcap: Any, temperature: float, outputs: tuple[str, ...],
    args: Any, kwargs: dict[str, Any],
) -> tuple[list[Any], Any, Any]:  # fmt: skip
    """:func:`chunked_token_logps` of ``labels`` (shifted: the hidden state at ``t - 1`` scores label ``t``) under
    ``model`` (an unwrapped causal LM) run on ``args`` / ``kwargs``: each field ``[B, T - 1]``, zero where the label is
    -100, that mask, and the base model's output (its ``router_logits`` when asked for)."""
    head = model.get_output_embeddings()
    kwargs["use_cache"] = False
    base = model.base_model(*args, **kwargs)
    hidden = base.last_hidden_state[:, :-1]
    shifted = labels[:, 1:].to(head.weight.device)
    mask = shifted != -100
    per_token = chunked_token_logps(
        hidden.to(head.weight.device)[mask], head.weight, shifted[mask], chunk_size,
        softcap=softcap, temperature=temperature, outputs=outputs,
    )  # fmt: skip
    # masked_scatter keeps an all-masked batch connected to the model (a differentiable zero), as TRL does
    return [None if x is None else x.new_zeros(mask.shape).masked_scatter(mask, x) for x in per_token], mask, base


def label_logps(
    model: Any, labels: Any, chunk_size: int = DEFAULT_LOSS_CHUNK_SIZE, *, temperature: float = 1.0, **inputs: Any
) -> tuple[Any, Any]:
    """Each label's log-probability under ``model`` (causal: the logits at ``t - 1`` score label ``t``; ``-100``: no
    label) for a forward without a TRL head (CHORD's expert batch, a distillation teacher's scores): ``chunk_size``
    tokens' logits at a time, so the full ``tokens x vocab`` logits never exist, where the head can be chunked (see
    :func:`use_chunked_lm_head`); else (``chunk_size`` 0 among the reasons) from the model's full logits.

    Args:
        model: a causal LM, or a peft model around one (its adapters apply).
        labels: ``[B, T]`` token ids, ``-100`` where nothing is scored.
        chunk_size: tokens per chunk; 0 (``--loss-chunk-size 0``): the full logits.
        temperature: the logits are divided by it.
        inputs: the model's inputs (``input_ids``, ``attention_mask``, ...).

    Returns:
        ``(log_probs, mask)``, both ``[B, T - 1]``: float32 log-probs, zero where ``mask`` (a label) is False.
    """
    import torch

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if _head_reason(base, chunk_size) is None and type(base.get_output_embeddings()) is torch.nn.Linear:
        text = base.config.get_text_config() if hasattr(base.config, "get_text_config") else base.config
        softcap = getattr(text, "final_logit_softcapping", None)
        fields, mask, _ = _scored_labels(
            base, labels, chunk_size, softcap, temperature, ("log_probs",), (), dict(inputs)
        )
        return fields[0], mask
    logits = model(**inputs, use_cache=False).logits[:, :-1].float() / temperature
    shifted = labels[:, 1:].to(logits.device)
    mask = shifted != -100
    logps = torch.log_softmax(logits, dim=-1).gather(-1, shifted.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return logps.masked_fill(~mask, 0.0), mask
