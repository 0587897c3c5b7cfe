"""The ``gkd.megatron`` recipe: GKD on-policy distillation on megatron-core (``swiftcore train --engine megatron
--recipe gkd``), read top to bottom.

It is the ``gkd`` recipe of swiftcore-recipe-rl on this engine, with that recipe's own parts: its options
(``GKDOptions``: ``--teacher-model``, ``--gkd-beta``, the sampling flags), its plan (``plan_run``: every check, the
teacher's spec and vocabulary, the prompts encoded by the family's template), the colocated rollout engine and weight
sync ``grpo.megatron`` uses (``create_rollout_engine``, ``WeightSync``), and one loss definition, TRL's:
:func:`gkd_loss` is ``GKDTrainer.generalized_jsd_loss`` (TRL 1.16's generalised JSD of Agarwal et al., arXiv:2306.13649,
on logits), the divergence the transformers engine's ``DistillationTrainer`` computes chunk by chunk from hidden
states (checked equal on a fixed batch: ``tests/test_engine_gkd.py``).

One optimiser step:

1. rank 0 samples one completion for each of the step's prompts (``--batch-size`` of each data-parallel replica;
   each replica then learns on its own prompts' completions, as in ``grpo.megatron``) with the rollout engine
   (swiftcore's transformers backend in this process, synced to the student's current weights; on-policy, as TRL 1.16's
   ``DistillationTrainer`` always is);
2. the completions go to every rank; each runs the sharded student, keeps the logits of the completion positions and
   gathers their vocabulary shards over the tensor-parallel ranks (megatron's
   ``gather_from_tensor_model_parallel_region``, whose backward hands each rank its shard's gradient back): the
   divergence needs each position's whole next-token distribution, unlike GRPO's log-probs, which the
   vocabulary-parallel cross entropy forms without gathering. Each rank also runs the teacher, a plain transformers
   model on every rank (frozen, eval mode: every rank computes the same teacher logits, with no broadcast of a
   ``(B, C, V)`` tensor), and the loss; backward, gradients reduced and clipped, optimiser step (the SFT loop's);
3. the next step's sync pushes the updated weights to the rollout engine (full weights, through the bridge's rules
   run backwards, as ``grpo.megatron``; with ``--tuner lora`` only the adapter's tensors, as ``grpo.megatron``).

Checkpoints are the SFT loop's (megatron shards and the Hugging Face model).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from swiftcore_train import TrainConfig, TrainResult, is_main_process

from swiftcore.api import SwiftcoreError
from swiftcore_train_megatron.grpo import GRPOLoop, completion_rows, prepare_rl_run, rl_refusals
from swiftcore_train_megatron.layout import ParallelLayout

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = ["GKDLoop", "completion_logits", "gkd_loss", "run_megatron_gkd"]

log = logging.getLogger("swiftcore.train.megatron")


def refuse_gkd(cfg: TrainConfig, options: Any, layout: ParallelLayout, world: int) -> None:
    """What ``gkd.megatron`` does not do yet, refused by name before anything loads (besides the engine's own).

    Raises:
        SwiftcoreError: every unsupported option, each with what would work.
    """
    problems = rl_refusals(cfg, options, layout, world, "GKD")
    if problems:
        raise SwiftcoreError("--engine megatron --recipe gkd:\n  " + "\n  ".join(problems))


def run_megatron_gkd(cfg: TrainConfig, plugins: PluginSet, layout: ParallelLayout) -> TrainResult:
    """Distil ``--teacher-model`` into ``cfg.model`` on ``cfg.dataset``'s prompts with megatron-core (see
    ``swiftcore train --help``).

    Returns:
        :class:`~swiftcore_train.config.TrainResult`; each ``checkpoint-N`` is a Hugging Face model and the megatron
        shards, as ``sft.megatron`` saves them (with ``--tuner lora``: the peft adapter and the LoRA shards).
    """
    from swiftcore_recipe_rl import GKDOptions

    run = prepare_rl_run(cfg, plugins, layout, "gkd", GKDOptions, refuse_gkd)
    log.info("gkd: teacher %s", run.options.teacher_model)
    loop = run.loop(GKDLoop, plugins)
    loop.attach_teacher(load_teacher(run.plan.teacher, run.options.teacher_model, plugins))
    if is_main_process():
        loop.attach_rollouts(run.plan, plugins)
    try:
        return loop.run()
    finally:
        loop.close()


def load_teacher(spec: Any, model_dir: str, plugins: PluginSet) -> Any:
    """The teacher as the transformers engine loads it (``load_model``, float32), frozen, in eval mode, on this rank's
    device."""
    import torch

    from swiftcore.api.models import load_model

    teacher = load_model(spec, model_dir, plugins, torch_dtype="float32")
    if torch.cuda.is_available():
        teacher = teacher.to(torch.cuda.current_device())
    return teacher.eval().requires_grad_(False)


# ---------------------------------------------------------------------------------------------- the loss's parts


def completion_logits(model: Any, batch: dict[str, Any]) -> Any:
    """The megatron model's logits ``(B, C, V)`` at the positions that predict ``batch``'s completion tokens, over the
    whole vocabulary, with gradient.

    ``batch`` is TRL's layout (``prompt_ids``/``prompt_mask`` left-padded, ``completion_ids`` right-padded). Each row
    runs as its real prompt tokens then its completion, from position 0 (megatron's rotary reads no position ids, and
    a left pad would be attended to: it has no attention mask here). Under tensor parallelism each rank computes its
    slice of the vocabulary; the completion positions' slices are gathered over the tensor-parallel ranks (megatron's
    ``gather_from_tensor_model_parallel_region``; its backward gives each rank its own slice of the gradient), since
    the divergence needs each whole distribution.
    """
    import torch
    from megatron.core.tensor_parallel import gather_from_tensor_model_parallel_region
    from swiftcore_megatron import eager_on_cpu

    from swiftcore_train_megatron.engine import sequence_parallel_length

    # Rows padded to a multiple of the TP size where the model runs sequence parallel (the rounding of length 1).
    input_ids, _, index = completion_rows(batch, sequence_parallel_length(model, 1))
    device = next(model.parameters()).device
    input_ids, index = input_ids.to(device), index.to(device)
    positions = torch.arange(input_ids.shape[1], device=device).unsqueeze(0).expand(input_ids.shape[0], -1)
    with eager_on_cpu():
        logits = model(input_ids=input_ids, position_ids=positions, attention_mask=None)  # (B, S, V / tp)
    local = logits.float().gather(1, index.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))  # (B, C, V / tp)
    return gather_from_tensor_model_parallel_region(local.contiguous())


def teacher_logits(teacher: Any, batch: dict[str, Any]) -> Any:
    """The teacher's logits ``(B, C, V)`` at the positions that predict ``batch``'s completion tokens (a plain
    transformers forward of the same rows as :func:`completion_logits`, without gradient)."""
    import torch

    input_ids, attention_mask, index = completion_rows(batch)
    device = next(teacher.parameters()).device
    with torch.no_grad():
        logits = teacher(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device)).logits.float()
    index = index.to(device)
    return logits.gather(1, index.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))


def gkd_loss(
    student_logits: Any, teacher_logits: Any, completion_mask: Any, options: Any, num_items: Any = None
) -> Any:
    """TRL 1.16's generalised JSD (``GKDTrainer.generalized_jsd_loss``) of the student's and the teacher's
    next-token distributions over the completion tokens: both logits divided by ``--rollout-temperature`` (as TRL's
    ``DistillationTrainer`` does), ``beta = --gkd-beta`` (0: forward KL(teacher || student), 1: reverse
    KL(student || teacher), between them the JSD with mixture ``(1 - beta) p_student + beta p_teacher``), summed over
    the completion tokens and divided by their count (``num_items``: the round's, when these rows are one
    data-parallel replica's slice of it).

    Args:
        student_logits: ``(B, C, V)`` with gradient (:func:`completion_logits`).
        teacher_logits: ``(B, C, V)`` (:func:`teacher_logits`).
        completion_mask: ``(B, C)``; 1 marks a completion token.
        options: the ``gkd`` recipe's ``GKDOptions``.
        num_items: the completion tokens the sum is divided by (default: ``completion_mask``'s).

    Raises:
        SwiftcoreError: the two vocabularies differ in size.
    """
    import warnings

    import torch

    with warnings.catch_warnings():  # the one TRL loss on logits lives in trl.experimental (its notice, once)
        warnings.filterwarnings("ignore", message=r"You are importing from 'trl\.experimental'")
        from trl.experimental.gkd import GKDTrainer

    if student_logits.shape[-1] != teacher_logits.shape[-1]:
        raise SwiftcoreError(
            f"--teacher-model {options.teacher_model}: its vocabulary has {teacher_logits.shape[-1]} entries and the "
            f"student's {student_logits.shape[-1]}; GKD compares whole next-token distributions, so give a teacher "
            "with the student's vocabulary"
        )
    mask = completion_mask.to(student_logits.device).bool()
    labels = torch.where(mask, 0, -100)
    return GKDTrainer.generalized_jsd_loss(
        student_logits, teacher_logits.to(student_logits.device), labels=labels, beta=options.gkd_beta,
        temperature=options.rollout_temperature,
        num_items_in_batch=(mask.sum() if num_items is None else num_items).clamp(min=1),
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------- the loop


class GKDLoop(GRPOLoop):
    """``grpo.megatron``'s loop (rollouts on rank 0, the weight sync, the step) with GKD's rollouts (one completion
    per prompt, no reward) and loss (:func:`gkd_loss` against the teacher).

    Args (besides the loop's):
        options: the ``gkd`` recipe's ``GKDOptions``.
    """

    def __init__(self, *, options: Any, **loop: Any) -> None:
        super().__init__(options=options, **loop)
        self.teacher: Any = None

    def _router_aux_loss(self) -> None:
        """None: TRL's ``DistillationTrainer`` adds no router load-balancing loss to the divergence, on MoE students
        too."""
        return None

    def attach_teacher(self, teacher: Any) -> None:
        """Every rank: the teacher (:func:`load_teacher`)."""
        self.teacher = teacher

    def attach_rollouts(self, plan: Any, plugins: Any) -> None:
        """On rank 0: the rollout engine (the transformers backend on ``--model``, in this process) and the weight
        sync, as ``grpo.megatron`` builds them."""
        import torch
        from swiftcore_recipe_rl import WeightSync, create_rollout_engine

        device = "cuda" if torch.cuda.is_available() else "cpu"
        self.engine = create_rollout_engine("transformers", plan.cfg, plugins, template=plan.template.name,
                                            device=device)  # fmt: skip
        self.weight_sync = WeightSync(self.engine, bucket_mb=self.options.sync_bucket_mb)
        self._prompt_ids = plan.prompts.ids
        self._spec = plan.spec

    def _generate(self, rows: list[dict]) -> dict[str, Any]:
        """Rank 0: one completion of each row's prompt, sampled from the student's current weights."""
        import torch
        from swiftcore_infer import Request, SamplingParams

        opts = self.options
        sampling = SamplingParams(
            max_new_tokens=int(opts.max_completion_length), temperature=float(opts.rollout_temperature),
            top_p=float(opts.rollout_top_p), top_k=int(opts.rollout_top_k or 0),
        )  # fmt: skip
        prompts = [r["prompt"] for r in rows]
        adapter = self.rollout_adapter
        requests = [Request(prompt=list(self._prompt_ids[p]), sampling=sampling, adapter=adapter) for p in prompts]
        start = time.perf_counter()
        with torch.random.fork_rng(devices=[]):  # sampled under --seed and the step alone, whatever the layout
            torch.manual_seed(self.cfg.seed + self.step)
            out = self.engine.generate_rollouts(requests)
        completions = [list(map(int, ids)) for _, ids in out]
        metrics = {
            "completions/mean_length": sum(map(len, completions)) / len(completions),
            "rollout_s": time.perf_counter() - start,
        }
        return {"prompt_ids": [list(self._prompt_ids[p]) for p in prompts], "completion_ids": completions,
                "metrics": metrics}  # fmt: skip

    def rollout_batch(self, rollouts: dict[str, Any]) -> dict[str, Any]:
        """The rollouts as TRL's distillation reads them: prompts left-padded, completions right-padded, masks."""
        import torch

        pad = self.pad_token_id
        prompts, completions = rollouts["prompt_ids"], rollouts["completion_ids"]
        p_len, c_len = max(map(len, prompts)), max(1, max(map(len, completions)))
        completion_mask = torch.tensor([[1] * len(c) + [0] * (c_len - len(c)) for c in completions])
        return {
            "prompt_ids": torch.tensor([[pad] * (p_len - len(p)) + p for p in prompts]),
            "prompt_mask": torch.tensor([[0] * (p_len - len(p)) + [1] * len(p) for p in prompts]),
            "completion_ids": torch.tensor([c + [pad] * (c_len - len(c)) for c in completions]),
            "completion_mask": completion_mask,
            "num_items_in_batch": completion_mask.sum(),
        }

    def learn(self, batch: dict[str, Any]) -> tuple[float, float, dict[str, float]]:
        """One optimiser step on this data-parallel replica's slice of the round (:meth:`GRPOLoop.replica_batch`;
        with one replica, the round): ``(loss, grad norm, metrics)``. Each replica's divergence is summed over its
        completion tokens and divided by the round's (``num_items_in_batch``), so the replicas' shares sum to the
        round's token mean, the one-replica loss."""
        student = completion_logits(self.model, batch)
        share = gkd_loss(student, teacher_logits(self.teacher, batch), batch["completion_mask"], self.options,
                         num_items=batch["num_items_in_batch"])  # fmt: skip
        loss, norm = self.step_on(share)
        return loss, norm, {}
