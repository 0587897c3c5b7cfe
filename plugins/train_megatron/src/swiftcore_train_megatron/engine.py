"""One rank's share of a megatron-core training step: the sharded model, the loss, gradients reduced and clipped.

megatron-core's own ``DistributedDataParallel`` and ``get_megatron_optimizer`` allocate their buffers and norms on
CUDA (``param_and_grad_buffer``, ``clip_grads``), so on a CPU they cannot run; the gradient reduction they perform
is small and is done here with the same process groups and the same rules (megatron's ``finalize_model_grads``):

- dense gradients are summed over the data-parallel group, expert gradients (``param.allreduce == False``) over
  the expert-data-parallel group;
- q/k layernorm gradients are summed over the tensor-parallel group (each rank saw only its heads), gradients
  marked ``average_gradients_across_tp_domain`` averaged;
- the gradient norm counts each tensor once: tensor-parallel shards on every rank, replicated tensors on tensor-
  parallel rank 0, and only on data-parallel rank 0 of their replicas;
- under pipeline parallelism a tied embedding's copies on the first and last stage sum their gradients over the
  embedding group, and the norm counts the first stage's.

Under pipeline parallelism the micro-batches run through megatron-core's own schedule (1F1B,
``get_forward_backward_func``); megatron's point-to-point exchanges work on gloo within
:func:`swiftcore_megatron.cpu_patches.pipeline_on_cpu`. With ``--vpp N`` each rank holds ``N`` model chunks (a
``torch.nn.ModuleList`` of them, :func:`model_chunks`) and megatron's schedule is its interleaved 1F1B.

The loss is token-weighted over the whole optimiser step (every micro-batch of every data-parallel rank), so the
step's loss and gradients are those of one process training the same samples: the mean over their label tokens.

A model with multi-token-prediction layers (a bridge's model with megatron's MTP block, ``model.mtp_process``) also
trains them as megatron does: the MTP loss is added to the gradients only (the reported loss is the main one), times
``mtp_loss_scaling_factor``, over the same label tokens shifted once more, and weighted by the same token count.

A MoE family's router load-balancing loss is added as the transformers engine adds it (:class:`RouterAuxLoss`:
transformers' ``load_balancing_loss_func`` on the megatron routers' logits, times the checkpoint's
``router_aux_loss_coef``, :func:`router_aux_loss_coef`): by DPO and KTO as TRL's ``DPOTrainer`` / ``KTOTrainer`` add
it; by SFT when the config's ``output_router_logits`` is true, as the transformers models add it to their own loss:
each micro-batch's ``coef * aux_loss`` (over its real tokens) added unscaled to the step's token-weighted loss, so the
step's term is the sum over its micro-batches on every data-parallel rank, as transformers' Trainer sums it (the model
loss of each micro-batch is not divided when the Trainer weights by ``num_items_in_batch``, and is multiplied by the
number of ranks that DDP then averages over). ``reward`` models add none (TRL's ``RewardTrainer`` and transformers'
sequence classifiers do not). megatron's own aux losses stay off (the bridges build the routers with
``moe_router_load_balancing_type="none"``).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "check_replicated_gradients",
    "clip_gradients",
    "gradient_norm",
    "ModelInputs",
    "label_tokens",
    "load_sharded_model",
    "micro_batch_loss",
    "model_inputs",
    "pipeline_loss",
    "reduce_tied_embedding",
    "build_model",
    "model_chunks",
    "needs_sequence_parallel",
    "pipeline_stage",
    "real_tokens",
    "reduce_gradients",
    "router_aux_loss_coef",
    "RouterAuxLoss",
    "scale_mtp_loss",
    "sequence_parallel_length",
]

IGNORE_INDEX = -100


def load_sharded_model(bridge: Any, model_dir: str | Path, *, tp: int, ep: int) -> Any:
    """Build this rank's megatron-core model (float32) and fill it from the HF checkpoint through the bridge.

    Only this rank's shards (of its pipeline stage's tensors, under pipeline parallelism) are read (the bridge's
    rules, the same ones ``swiftcore export --to-mcore`` writes rank files with); model-parallel state must be
    initialised. Under virtual pipeline parallelism it is the rank's model chunks, a ``torch.nn.ModuleList``, each
    built with megatron's virtual pipeline rank set to its index (as megatron's ``get_model`` builds them).
    """
    import torch
    from megatron.core import parallel_state

    chunks = parallel_state.get_virtual_pipeline_model_parallel_world_size() or 1
    if chunks == 1:
        return _load_stage(bridge, model_dir, tp=tp, ep=ep)
    built = []
    try:
        for chunk in range(chunks):
            parallel_state.set_virtual_pipeline_model_parallel_rank(chunk)
            built.append(_load_stage(bridge, model_dir, tp=tp, ep=ep))
    finally:
        parallel_state.set_virtual_pipeline_model_parallel_rank(0)
    return torch.nn.ModuleList(built)


def _load_stage(bridge: Any, model_dir: str | Path, *, tp: int, ep: int) -> Any:
    """The model (or model chunk) of this rank's current stage, filled from the HF checkpoint."""
    import torch
    from megatron.core import parallel_state
    from swiftcore_megatron import HFReader, load_into_model, rank_producers

    tp_rank = parallel_state.get_tensor_model_parallel_rank()
    ep_rank = parallel_state.get_expert_model_parallel_rank()
    stage = pipeline_stage(bridge)
    with HFReader(Path(model_dir)) as reader:
        producers = rank_producers(bridge, reader, tp=tp, ep=ep, tp_rank=tp_rank, ep_rank=ep_rank, stage=stage)
        state = {key: _as_float32(make()) for key, make in producers.items()}
    model = build_model(bridge, tp=tp, ep=ep)
    load_into_model(model, state)
    if torch.cuda.is_available():  # built on the CPU (use_cpu_initialization), trained on this rank's GPU
        model.cuda()
    return model


def model_chunks(model: Any) -> list[Any]:
    """The model chunks of ``model``: the ``torch.nn.ModuleList`` :func:`load_sharded_model` returns under virtual
    pipeline parallelism, else ``[model]``."""
    import torch

    return list(model) if isinstance(model, torch.nn.ModuleList) else [model]


def pipeline_stage(bridge: Any) -> Any:
    """This rank's :class:`~swiftcore_megatron.pipeline.Stage` under pipeline parallelism (under virtual pipeline
    parallelism the model chunk megatron's virtual pipeline rank names), else None."""
    from megatron.core import parallel_state
    from swiftcore_megatron import stages

    pp = parallel_state.get_pipeline_model_parallel_world_size()
    if pp == 1:
        return None
    chunks = parallel_state.get_virtual_pipeline_model_parallel_world_size() or 1
    chunk = parallel_state.get_virtual_pipeline_model_parallel_rank() if chunks > 1 else 0
    return stages(bridge, pp, chunks)[chunk * pp + parallel_state.get_pipeline_model_parallel_rank()]


def needs_sequence_parallel(bridge: Any, tp: int) -> bool:
    """Whether the model trains with megatron's sequence parallelism: MoE layers refuse tensor parallelism in
    training without it (``MoELayer.forward``)."""
    return tp > 1 and bridge.num_experts() > 0


def build_model(bridge: Any, *, tp: int, ep: int) -> Any:
    """The bridge's megatron-core model in float32 (its own ``build_model``: some families have their own model
    class), with sequence parallelism where MoE needs it; under virtual pipeline parallelism the model chunk
    megatron's virtual pipeline rank names."""
    import dataclasses

    import torch
    from megatron.core import parallel_state

    from swiftcore.api import SwiftcoreError

    chunks = parallel_state.get_virtual_pipeline_model_parallel_world_size() or 1
    if not needs_sequence_parallel(bridge, tp) and chunks == 1:
        return _per_token_mtp_loss(bridge.build_model(tp=tp, ep=ep, params_dtype=torch.float32))
    # The bridge builds its config and model arguments inside build_model: shadow its transformer_config (sequence
    # parallelism, the virtual pipeline size) and model_kwargs (the chunk megatron builds: its layer offset, whether
    # it holds the embedding or the head) on this instance for the call.
    plain, plain_kwargs = bridge.transformer_config, bridge.model_kwargs
    changes: dict[str, Any] = {"sequence_parallel": True} if needs_sequence_parallel(bridge, tp) else {}
    if chunks > 1:
        changes["virtual_pipeline_model_parallel_size"] = chunks
        chunk = parallel_state.get_virtual_pipeline_model_parallel_rank()
        bridge.model_kwargs = lambda: {**plain_kwargs(), "vp_stage": chunk}
    bridge.transformer_config = lambda **kw: dataclasses.replace(plain(**kw), **changes)
    try:
        return _per_token_mtp_loss(bridge.build_model(tp=tp, ep=ep, params_dtype=torch.float32))
    except AssertionError as exc:
        if "sequence_parallel" not in changes:
            raise
        # e.g. MiMo-V2's norms (megatron's WrappedTorchNorm; its bridge has no sequence_parallel_norms) assert so.
        raise SwiftcoreError(
            f"--tp {tp}: megatron-core trains MoE layers under tensor parallelism only with sequence parallelism, "
            f"which this model's layers do not support ({exc}); split it with --ep instead (--tp 1)"
        ) from exc
    finally:
        del bridge.transformer_config
        if chunks > 1:
            del bridge.model_kwargs


def _per_token_mtp_loss(model: Any) -> Any:
    """``model``, its MTP loss (if it has MTP layers) summed over tokens like the main loss, not averaged per
    micro-batch: :func:`scale_mtp_loss` then divides it by the step's token count, as the main loss is."""
    if getattr(model, "mtp_process", False):
        model.config.calculate_per_token_loss = True  # read at forward time (GPTModel._postprocess)
    return model


def scale_mtp_loss(step_tokens: int) -> None:
    """Weight the MTP loss of the next backward passes by ``1 / step_tokens``, the main loss's weight.

    megatron adds the MTP loss to the gradients in backward (``MTPLossAutoScaler``) with a process-wide scale that
    its own schedule sets per step; this loop sets it. Models without MTP layers ignore it.
    """
    import torch
    from megatron.core.transformer.multi_token_prediction import MTPLossAutoScaler

    MTPLossAutoScaler.set_loss_scale(torch.tensor(1.0 / max(step_tokens, 1)))


def _as_float32(tensor: Any) -> Any:
    return tensor.float() if tensor.is_floating_point() else tensor


def label_tokens(samples: list[dict]) -> int:
    """Label tokens of ``samples`` that carry loss (after the one-token shift of causal LM training)."""
    return sum(sum(1 for label in sample["labels"][1:] if label != IGNORE_INDEX) for sample in samples)


def micro_batch_loss(model: Any, samples: list[dict], pad_token_id: int, length: int | None = None) -> Any:
    """The summed next-token loss of ``samples`` (right-padded into one batch) under the megatron model.

    transformers shifts labels inside the model (position t predicts label t+1); megatron's loss is per position
    against labels already aligned, so the labels move one to the left here and the last position carries none.

    Args:
        length: pad to this many positions (at least the longest sample): the micro-batches that expert-parallel
            ranks run together must have one shape, since the MoE dispatcher all-gathers their tokens.
    """
    from swiftcore_megatron import eager_on_cpu

    inputs = model_inputs(samples, pad_token_id, length)
    with eager_on_cpu():
        return _summed_loss(inputs, model(**inputs.forward_kwargs()))


@dataclass
class ModelInputs:
    """One micro-batch as the megatron model takes it: ids, positions, labels aligned to positions, loss mask."""

    input_ids: Any
    positions: Any
    labels: Any
    mask: Any

    def forward_kwargs(self) -> dict[str, Any]:
        """The GPTModel forward's arguments (padding and prompt positions carry no loss)."""
        return {
            "input_ids": self.input_ids,
            "position_ids": self.positions,
            "attention_mask": None,
            "labels": self.labels.masked_fill(~self.mask, 0),
            "loss_mask": self.mask.float(),
        }


def model_inputs(samples: list[dict], pad_token_id: int, length: int | None = None, rows: int = 0) -> ModelInputs:
    """``samples`` right-padded into one batch of at least ``length`` positions and ``rows`` rows (rows of padding
    carry no loss: the stages of a pipeline exchange activations of one shape), labels shifted for megatron.

    Under context parallelism (``--cp``) the batch is padded to a multiple of ``2 * cp`` positions and this rank
    keeps its two chunks of it (:func:`swiftcore_train_megatron.cp.shard_sequence`), labels shifted before the split.
    """
    import torch
    import torch.nn.functional as F
    from megatron.core import parallel_state
    from swiftcore_data import PaddingCollator

    from swiftcore_train_megatron.cp import padded_length, shard_sequence

    cp = parallel_state.get_context_parallel_world_size() if parallel_state.model_parallel_is_initialized() else 1
    batch = PaddingCollator(pad_token_id)(samples)
    input_ids, hf_labels = batch["input_ids"], batch["labels"]
    if cp > 1:
        length = padded_length(max(length or 0, input_ids.shape[1]), cp)
    extra = (length or 0) - input_ids.shape[1]
    more_rows = rows - input_ids.shape[0]
    if extra > 0 or more_rows > 0:
        input_ids = F.pad(input_ids, (0, max(extra, 0), 0, max(more_rows, 0)), value=pad_token_id)
        hf_labels = F.pad(hf_labels, (0, max(extra, 0), 0, max(more_rows, 0)), value=IGNORE_INDEX)
    labels = torch.full_like(hf_labels, IGNORE_INDEX)
    labels[:, :-1] = hf_labels[:, 1:]
    mask = labels != IGNORE_INDEX
    positions = torch.arange(input_ids.shape[1]).unsqueeze(0).expand_as(input_ids)
    if torch.cuda.is_available():
        input_ids, positions, labels, mask = (t.cuda() for t in (input_ids, positions, labels, mask))
    if cp > 1:
        mine = shard_sequence({"input_ids": input_ids, "positions": positions, "labels": labels, "mask": mask})
        input_ids, positions, labels, mask = (mine[k] for k in ("input_ids", "positions", "labels", "mask"))
    # Right padding under a causal mask changes nothing for the real tokens; padding carries no loss.
    return ModelInputs(input_ids, positions, labels, mask)


def _summed_loss(inputs: ModelInputs, per_token: Any) -> Any:
    return (per_token.float() * inputs.mask).sum()


def pipeline_loss(model: Any, batches: list[ModelInputs], step_tokens: int, *, forward_only: bool = False) -> Any:
    """The summed loss of ``batches`` through the pipeline stages with megatron-core's schedule (1F1B: each
    stage starts a micro-batch's backward as soon as the last stage has its loss), gradients included unless
    ``forward_only``. Every stage returns the sum (the last stage computes it). Under virtual pipeline parallelism
    (``model`` a list of chunks, :func:`model_chunks`) the schedule is megatron's interleaved 1F1B.

    The gradients are those of ``loss_sum / step_tokens``, as in the loop without a pipeline: megatron's per-token
    loss mode leaves each micro-batch's sum unscaled, and ``grad_scale_func`` divides it by the step's tokens at
    the start of the backward pass.
    """
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from swiftcore_megatron import eager_on_cpu, pipeline_on_cpu

    chunks = model_chunks(model)
    for chunk in chunks:
        chunk.config.calculate_per_token_loss = True
        chunk.config.grad_scale_func = lambda loss: loss / max(step_tokens, 1)
        # megatron's default (set in the config's __post_init__) is the pipeline size, which the bridge's config
        # got only after it was made: the depth-first order, --pp micro-batches per chunk at a time.
        chunk.config.microbatch_group_size_per_vp_stage = parallel_state.get_pipeline_model_parallel_world_size()

    def forward_step(data_iterator: Any, stage_model: Any) -> tuple[Any, Any]:
        inputs = next(data_iterator)

        def loss_func(per_token: Any) -> tuple[Any, Any, dict[str, Any]]:
            loss = _summed_loss(inputs, per_token)
            return loss, inputs.mask.sum().to(torch.int), {"loss_sum": loss.detach()}

        return stage_model(**inputs.forward_kwargs()), loss_func

    rows, length = batches[0].input_ids.shape
    length *= parallel_state.get_context_parallel_world_size()  # the whole sequence: megatron divides it by cp
    with eager_on_cpu(), pipeline_on_cpu():
        results = get_forward_backward_func()(
            forward_step_func=forward_step,
            # The interleaved schedule reads one iterator per model chunk; each chunk runs every micro-batch in order.
            data_iterator=[iter(batches) for _ in chunks] if len(chunks) > 1 else iter(batches),
            model=chunks,
            num_microbatches=len(batches),
            seq_length=length,
            micro_batch_size=rows,
            forward_only=forward_only,
        )
    device = batches[0].input_ids.device
    total = torch.zeros((), device=device)
    for result in results:  # the last stage's; the others return none
        total += result["loss_sum"].to(device)
    dist.all_reduce(total, group=parallel_state.get_pipeline_model_parallel_group())
    return total


def reduce_tied_embedding(model: Any) -> None:
    """Sum the gradients of a tied embedding's two copies, on the first and the last pipeline stage, so that both
    take the same step (megatron's ``_allreduce_word_embedding_grads``); nothing to do without a pipeline."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    if parallel_state.get_pipeline_model_parallel_world_size() == 1:
        return
    for chunk in model_chunks(model):  # under virtual pipeline parallelism: the first chunk, or the last, holds it
        if not chunk.share_embeddings_and_output_weights or not (chunk.pre_process or chunk.post_process):
            continue
        weight = chunk.shared_embedding_or_output_weight()
        if weight.grad is not None:
            dist.all_reduce(weight.grad, group=parallel_state.get_embedding_group())


def _grads(model: Any, *, expert: bool) -> list[Any]:
    return [
        p.grad for p in model.parameters() if p.grad is not None and (getattr(p, "allreduce", True) is False) == expert
    ]


def _all_reduce(tensors: list[Any], group: Any, op: Any) -> None:
    """All-reduce ``tensors`` in place as one flat buffer (one collective, not one per tensor)."""
    import torch.distributed as dist
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

    if not tensors or dist.get_world_size(group) == 1:
        return
    flat = _flatten_dense_tensors(tensors)
    dist.all_reduce(flat, op=op, group=group)
    for tensor, synced in zip(tensors, _unflatten_dense_tensors(flat, tensors), strict=True):
        tensor.copy_(synced)


def reduce_gradients(model: Any, bridge: Any) -> None:
    """Sum gradients over data-parallel replicas and the tensor-parallel partial ones (see the module docstring)."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    _all_reduce(
        _grads(model, expert=False),
        parallel_state.get_data_parallel_group(with_context_parallel=True),
        dist.ReduceOp.SUM,
    )
    _all_reduce(_grads(model, expert=True), parallel_state.get_expert_data_parallel_group(), dist.ReduceOp.SUM)
    tp_group = parallel_state.get_tensor_model_parallel_group()
    if dist.get_world_size(tp_group) == 1:
        return
    summed, averaged = [], []
    for name, param in model.named_parameters():
        if param.grad is None or getattr(param, "tensor_model_parallel", False):
            continue
        if getattr(param, "average_gradients_across_tp_domain", False):
            averaged.append(param.grad)
        elif model_chunks(model)[0].config.sequence_parallel and getattr(param, "sequence_parallel", False):
            summed.append(param.grad)  # a norm that saw only this rank's part of the sequence
        elif _is_per_head_norm(model, name, bridge):
            summed.append(param.grad)
    _all_reduce(summed, tp_group, dist.ReduceOp.SUM)
    _all_reduce(averaged, tp_group, dist.ReduceOp.AVG)


def _is_per_head_norm(model: Any, name: str, bridge: Any) -> bool:
    """Whether ``name`` is a replicated tensor each tensor-parallel rank sees only part of: the q/k layernorms
    (megatron's own rule, with ``qk_layernorm``) and what the bridge lists (its ``tp_partial_gradients``, e.g.
    Qwen3.5's gated-DeltaNet ``out_norm``, which megatron leaves alone without sequence parallelism)."""
    if any(part in name for part in getattr(bridge, "tp_partial_gradients", ())):
        return True
    qk_layernorm = bool(getattr(model_chunks(model)[0].config, "qk_layernorm", False))
    return qk_layernorm and ("q_layernorm" in name or "k_layernorm" in name)


def check_replicated_gradients(model: Any, tolerance: float = 1e-6) -> None:
    """Refuse to go on when a tensor replicated over tensor-parallel ranks got different gradients on them.

    Called once, on the first step: a model with another kind of per-head parameter than those
    :func:`reduce_gradients` knows would otherwise train its replicas apart, silently.

    Raises:
        SwiftcoreError: naming the tensors.
    """
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state

    from swiftcore.api import SwiftcoreError

    tp_group = parallel_state.get_tensor_model_parallel_group()
    if dist.get_world_size(tp_group) == 1:
        return
    named = [
        (n, p.grad)
        for n, p in model.named_parameters()
        if p.grad is not None and not getattr(p, "tensor_model_parallel", False)
    ]
    if not named:
        return
    local = torch.cat([g.detach().flatten() for _, g in named])
    mean = local.clone()
    dist.all_reduce(mean, op=dist.ReduceOp.AVG, group=tp_group)
    deviation = (local - mean).abs()
    apart, offset = [], 0
    for name, grad in named:
        part = deviation[offset : offset + grad.numel()]
        offset += grad.numel()
        if float(part.max()) > tolerance * (1.0 + float(grad.abs().max())):
            apart.append(name)
    flags = torch.tensor([float(bool(apart))], device=local.device)
    dist.all_reduce(flags, group=tp_group)
    if float(flags) > 0:
        raise SwiftcoreError(
            "--engine megatron: replicated tensors got different gradients on the tensor-parallel ranks "
            f"({', '.join(apart[:6]) or 'on another rank'}): their reduction rule is missing from "
            "swiftcore_train_megatron.engine; train this family with --tp 1 until it is added"
        )


def gradient_norm(model: Any) -> float:
    """The L2 norm of the whole model's gradient (every tensor counted once over all ranks)."""
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel import param_is_not_tensor_parallel_duplicate

    dense_owner = parallel_state.get_data_parallel_rank(with_context_parallel=True) == 0
    expert_owner = parallel_state.get_expert_data_parallel_rank() == 0
    device = next(model.parameters()).device  # NCCL reduces GPU tensors only
    square = torch.zeros((), dtype=torch.float64, device=device)
    for param in model.parameters():
        # A tied head's copy of the embedding on the last pipeline stage (``shared``) is counted on the first.
        if param.grad is None or not param_is_not_tensor_parallel_duplicate(param) or getattr(param, "shared", False):
            continue
        if expert_owner if getattr(param, "allreduce", True) is False else dense_owner:
            square += param.grad.detach().double().pow(2).sum()
    if dist.get_world_size() > 1:
        dist.all_reduce(square)
    return math.sqrt(float(square))


def clip_gradients(model: Any, max_norm: float, norm: float) -> None:
    """Scale gradients so their norm is at most ``max_norm`` (torch's ``clip_grad_norm_`` rule, with the norm of
    every rank's shards rather than of this rank's tensors alone)."""
    coefficient = max_norm / (norm + 1e-6)
    if coefficient >= 1.0:
        return
    for param in model.parameters():
        if param.grad is not None:
            param.grad.mul_(coefficient)


def router_aux_loss_coef(model_dir: str | Path, *, rule: str = "preference") -> float:
    """The weight the transformers engine gives a model's router load-balancing loss (0.0: none), by ``rule``:

    - ``preference``: TRL 1.16's ``DPOTrainer`` / ``KTOTrainer``'s, as the transformers engine's ``dpo`` and ``kto``
      recipes configure them: TRL adds ``router_aux_loss_coef * outputs.aux_loss`` whenever the (text) config has an
      ``output_router_logits`` attribute, whatever its value (it asks the forward for the router logits), with the
      config's own ``router_aux_loss_coef`` (0.0 when it declares none); swiftcore-recipe-preference sets it to 0.0
      for a MoE config that names its expert count otherwise than ``num_experts``, which TRL's term cannot read.
    - ``grpo``: TRL 1.16's ``GRPOTrainer``'s (the ``grpo`` recipe leaves its ``router_aux_loss_coef`` unset): the
      config's coefficient whenever it has an ``output_router_logits`` attribute.
    - ``sft``: the rule of the transformers MoE models' own loss (``OlmoeForCausalLM`` and the others add
      ``router_aux_loss_coef * aux_loss`` to their loss only when ``output_router_logits`` is true), which the
      transformers engine's SFT loss keeps on its plain and chunked paths alike (``swiftcore_train.loss``).
    """
    from transformers import AutoConfig

    text = AutoConfig.from_pretrained(str(model_dir)).get_text_config()
    coef = float(getattr(text, "router_aux_loss_coef", 0.0) or 0.0)
    if rule == "sft":
        return coef if getattr(text, "output_router_logits", False) else 0.0
    if not hasattr(text, "output_router_logits") or (rule == "preference" and not hasattr(text, "num_experts")):
        return 0.0
    return coef


def sequence_parallel_length(model: Any, length: int) -> int:
    """``length`` rounded up to a multiple of the tensor-parallel size where ``model`` trains with sequence
    parallelism (MoE under ``--tp``: each rank holds an equal slice of the sequence), else ``length``."""
    from megatron.core import parallel_state

    if not model_chunks(model)[0].config.sequence_parallel:
        return length
    tp = parallel_state.get_tensor_model_parallel_world_size()
    return -(-length // tp) * tp


class RouterAuxLoss:
    """The router load-balancing loss of the transformers models (``load_balancing_loss_func`` of OLMoE, Qwen3-MoE,
    Qwen3.5-MoE, Mixtral, ...) computed from the megatron model's routers.

    transformers concatenates every MoE layer's router logits over the real tokens (``attention_mask``, padding
    left out) and returns ``num_experts * sum_e f_e * P_e``: ``f_e`` the share of (token, layer) rows whose top-k
    picks expert ``e`` (counted once per pick), ``P_e`` the mean softmax probability of ``e``; one value over all
    layers together, not a sum of per-layer losses as megatron's own ``aux_loss``. Here each megatron
    ``TopKRouter``'s gating output (the logits it routes with) is recorded during a forward pass
    (:meth:`recording`) and :meth:`loss` computes the same value, with its gradient through the logits.

    Args:
        model: the megatron model (one pipeline stage, no virtual chunks: the recipes using this refuse ``--pp``;
            under ``--tp`` the sequence-parallel routers' logits are gathered over the tensor-parallel ranks).
        coef: the weight of the loss (:func:`router_aux_loss_coef`).

    Raises:
        SwiftcoreError: the model routes with other routers than megatron's softmax ``TopKRouter`` (whose logits
            transformers' formula reads).
    """

    def __init__(self, model: Any, coef: float) -> None:
        from megatron.core.transformer.moe.router import TopKRouter

        from swiftcore.api import SwiftcoreError

        self.coef = coef
        # MTP layers' routers are left out: transformers' router_logits are the decoder layers' only.
        self.routers = [m for name, m in model.named_modules() if isinstance(m, TopKRouter) and "mtp." not in name]
        others = sorted({type(m).__name__ for m in model.modules() if "router" in type(m).__name__.lower()} -
                        {type(r).__name__ for r in self.routers})  # fmt: skip
        softmax = all(r.config.moe_router_score_function == "softmax" for r in self.routers)
        if not self.routers or others or not softmax:
            raise SwiftcoreError(
                "--engine megatron: this MoE model's routers "
                f"({', '.join(others) or 'sigmoid-scored TopKRouter' if self.routers else 'none found'}) are not "
                "megatron's softmax TopKRouter, so the router load-balancing loss the transformers engine adds "
                f"(router_aux_loss_coef {coef}) cannot be computed the same way; set router_aux_loss_coef to 0 (for "
                "SFT: or output_router_logits to false) in the checkpoint's config.json to train without it, or run "
                "this recipe on the default engine (drop --engine)"
            )
        self.top_k = self.routers[0].config.moe_router_topk
        self.num_experts = self.routers[0].config.num_moe_experts

    @contextlib.contextmanager
    def recording(self) -> Iterator[list[Any]]:
        """A context in which every forward pass appends each router's logits (``[sequence, batch, experts]``, as
        megatron routes them) to the list it yields."""
        recorded: list[Any] = []

        def record(gating: Any) -> Any:
            def gate(input: Any) -> Any:
                logits = gating(input)
                recorded.append(logits)
                return logits

            return gate

        for router in self.routers:
            router.gating = record(router.gating)  # an instance attribute in front of the class's method
        try:
            yield recorded
        finally:
            for router in self.routers:
                del router.gating

    def loss(self, recorded: list[Any], real: Any) -> Any:
        """transformers' ``load_balancing_loss_func`` over ``recorded`` logits (one forward pass's, :meth:`recording`)
        and ``real`` (``[batch, sequence]``, true on the batch's real tokens: its ``attention_mask``); a scalar with
        the logits' gradient."""
        from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func

        if len(recorded) != len(self.routers):
            from swiftcore.api import SwiftcoreError

            raise SwiftcoreError(f"--engine megatron: {len(recorded)} router calls in one forward pass, expected "
                                 f"{len(self.routers)} (one per MoE layer)")  # fmt: skip
        if self.routers[0].config.sequence_parallel:
            recorded = self._whole_sequences(recorded)
        # transformers' own function (OLMoE's, Qwen3-MoE's and Qwen3.5-MoE's are copies of Mixtral's): it pairs each
        # layer's logit rows with the flattened mask, so both stay in megatron's [sequence, batch] order.
        layers = tuple(logits.reshape(-1, self.num_experts).float() for logits in recorded)
        return load_balancing_loss_func(layers, self.num_experts, self.top_k, real.t())

    @staticmethod
    def _whole_sequences(recorded: list[Any]) -> list[Any]:
        """Each router's logits over the whole sequences under ``--tp`` (megatron trains MoE under tensor
        parallelism with sequence parallelism: each tensor-parallel rank routes its own slice of the sequence).

        Every tensor-parallel rank then computes the same loss from the gathered logits; the backward of megatron's
        gather with ``tensor_parallel_output_grad=False`` hands each rank the gradient of its own slice only (not
        the sum over the ranks, which would count the loss once per rank). The router weights are replicated and
        marked ``sequence_parallel``, so ``reduce_gradients`` sums their per-slice gradients over the
        tensor-parallel group, as it does for the token loss."""
        from megatron.core.tensor_parallel import gather_from_sequence_parallel_region

        return [gather_from_sequence_parallel_region(logits, tensor_parallel_output_grad=False) for logits in recorded]


def real_tokens(lengths: list[int], rows: int, positions: int, device: Any = None) -> Any:
    """``[rows, positions]`` bool: true on the first ``lengths[i]`` positions of row ``i`` (right padding, and rows
    past ``len(lengths)``, false): the ``attention_mask`` of a right-padded batch."""
    import torch

    index = torch.arange(positions, device=device).unsqueeze(0)
    sizes = torch.zeros(rows, dtype=torch.long, device=device)
    sizes[: len(lengths)] = torch.tensor(lengths, dtype=torch.long, device=device)
    return index < sizes.unsqueeze(1)
