"""The ``rm.megatron`` recipe: a reward model on megatron-core (``swiftcore train --engine megatron --recipe rm``), read
top to bottom.

It is the ``rm`` recipe of swiftcore-recipe-preference on this engine, with that recipe's own parts: its options
(``RMOptions``), checks and pairs (``prepare``), encoding (``encode_rm_pairs``), its model's score layer as
transformers builds it (``load_reward_model``: ``*ForSequenceClassification`` with one label, the same seed) and its
loss: ``reward_loss`` (that package's) runs TRL 1.16's own ``RewardTrainer.compute_loss`` on the rewards computed here.

The reward head is the score layer of that model: one linear map (hidden size -> 1, no bias) on the megatron model's
final hidden state (after the final norm; the vocabulary projection is skipped) at each sequence's last token that
is not padding, as transformers' sequence classifiers read it. It sits on the megatron model as ``reward_score``,
replicated over tensor-parallel ranks, so the optimiser, gradient reduction, clipping and norm treat it as any
replicated tensor. Every checkpoint is what the ``rm`` recipe saves, a whole ``*ForSequenceClassification`` model
(``AutoModelForSequenceClassification.from_pretrained(checkpoint)``): rank 0 loads the bridge's Hugging Face export
of the decoder into that class, sets the trained score layer and saves it over the export (the megatron shards hold
the decoder only). With ``--tuner lora`` the decoder's layers get the engine's LoRA (``swiftcore_train_megatron.lora``)
and the score layer trains in full, as peft's ``modules_to_save`` does for the ``rm`` recipe; the checkpoint is, as
that recipe's, the whole classifier with the adapter merged (the megatron shards keep the adapter for a resume).
``--resume-from-checkpoint`` is the SFT loop's resume of the decoder and the optimizer (the score layer's state
included), the score layer's weights read back from the checkpoint's classifier.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swiftcore_train import TrainConfig, TrainResult, is_main_process

from swiftcore.api import SwiftcoreError
from swiftcore_train_megatron.kto import recipe_options, refuse_model, refuse_preference
from swiftcore_train_megatron.layout import ParallelLayout, world_size
from swiftcore_train_megatron.loop import TrainLoop

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = ["RMLoop", "run_megatron_rm"]

log = logging.getLogger("swiftcore.train.megatron")


def _refuse_rm(cfg: TrainConfig, layout: ParallelLayout) -> None:
    problems = refuse_preference(cfg, layout, "rm")
    if problems:
        raise SwiftcoreError("--engine megatron --recipe rm:\n  " + "\n  ".join(problems))


def _check_sequence_classifier(model_dir: str, spec: Any) -> None:
    """Refuse a family transformers has no ``*ForSequenceClassification`` class for (before anything loads)."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING

    if type(AutoConfig.from_pretrained(model_dir)) not in MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING:
        raise SwiftcoreError(
            f"--engine megatron --recipe rm: transformers has no sequence-classification model for {spec.name!r} "
            f"({spec.provider}), so its reward model could not be saved for AutoModelForSequenceClassification; "
            "train the reward model on a family that has one"
        )


def run_megatron_rm(cfg: TrainConfig, plugins: PluginSet, layout: ParallelLayout) -> TrainResult:
    """Train a reward model of ``cfg.model`` on ``cfg.dataset`` pairs with megatron-core (``swiftcore train --help``).

    Returns:
        :class:`~swiftcore_train.config.TrainResult`; each ``checkpoint-N`` loads with
        ``AutoModelForSequenceClassification`` (one score per sequence), beside the megatron shards.
    """
    from dataclasses import asdict

    from swiftcore_recipe_preference import RMOptions, encode_rm_pairs, prepare
    from swiftcore_train import start_run

    from swiftcore_train_megatron.recipe import (
        _add_lora,
        _bridge,
        _refuse_unsupported,
        _resumed_step,
        _schedule_and_optimizer,
        resume_checkpoint,
    )

    cfg.validate()
    _refuse_unsupported(cfg)
    options = recipe_options(cfg, RMOptions, "rm.megatron")
    _refuse_rm(cfg, layout)
    # prepare() refuses --resume-from-checkpoint for the transformers engine's trainer; this engine resumes.
    prepared = prepare(replace(cfg, resume_from_checkpoint=None), plugins, "rm")
    bridge_spec, bridge = _bridge(cfg, prepared.spec, plugins)
    refuse_model(bridge, bridge_spec, "rm")
    _check_sequence_classifier(cfg.model, prepared.spec)
    world = world_size()
    layout.check(bridge, bridge_spec, world)
    train = encode_rm_pairs(prepared.train, prepared.template, prepared.tokenizer, cfg)
    val = encode_rm_pairs(prepared.val, prepared.template, prepared.tokenizer, cfg) if prepared.val else []
    output_dir = Path(cfg.output_dir)
    resume = resume_checkpoint(cfg, output_dir, prepared.spec, layout)
    if is_main_process():
        from swiftcore_train import plan_output_dir, run_inputs

        plan_output_dir(
            output_dir, resume=resume is not None, overwrite=cfg.overwrite_output_dir, inputs=run_inputs(cfg)
        )
    log.info("rm: model %s, bridge %s, tp %d over %d rank(s)", prepared.spec.name, bridge_spec.name, layout.tp, world)

    # Every check passed: only now the process group and the model.
    from swiftcore_megatron import init_model_parallel

    from swiftcore_train_megatron.engine import load_sharded_model

    init_model_parallel(layout.tp, layout.ep, pp=layout.pp, seed=cfg.seed)
    model = load_sharded_model(bridge, cfg.model, tp=layout.tp, ep=layout.ep)
    # LoRA freezes the decoder; the score layer, added after it, trains in full (peft's modules_to_save for SEQ_CLS).
    lora = _add_lora(cfg, prepared.spec, bridge, model) if cfg.tuner == "lora" else None
    if prepared.tokenizer.pad_token_id is None:  # as the rm recipe: the score reads the last token not padding
        prepared.tokenizer.pad_token = prepared.tokenizer.eos_token
    model.reward_score = _score_layer(cfg, prepared, next(model.parameters()).device)
    schedule, optimizer, scheduler = _schedule_and_optimizer(cfg, output_dir, model, len(train), layout, world)
    args_record = start_run(
        cfg,
        output_dir,
        prepared.spec,
        plugins,
        fresh=resume is None,
        resumed_step=_resumed_step(resume),
        template=prepared.template_spec,
        engine=layout.record(world, bridge_spec.name),
        preference={"recipe": "rm", "num_labels": 1, **asdict(options)},
    )
    loop = RMLoop(
        cfg=cfg,
        output_dir=output_dir,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        schedule=schedule,
        train_samples=train,
        val_samples=val,
        pad_token_id=prepared.tokenizer.pad_token_id,
        bridge=bridge,
        bridge_name=bridge_spec.name,
        layout=layout,
        extras={"swiftcore_args.json": json.dumps(args_record, indent=2)},
        lora=lora,
        options=options,
    )
    if resume is not None:
        loop.resume(resume)
    return loop.run()


def _score_layer(cfg: TrainConfig, prepared: Any, device: Any) -> Any:
    """The score layer as the ``rm`` recipe's model starts it: rank 0 builds that model (``load_reward_model``, after
    ``torch.manual_seed(--seed)``, as the recipe does) and every rank takes its initial weights."""
    import torch
    import torch.distributed as dist

    weight = None
    if dist.get_rank() == 0:
        from swiftcore_recipe_preference import load_reward_model

        torch.manual_seed(cfg.seed)
        weight = load_reward_model(cfg, prepared.spec, prepared.tokenizer).score.weight.detach().float()
    shape = [None]
    if dist.get_rank() == 0:
        shape = [tuple(weight.shape)]
    dist.broadcast_object_list(shape, src=0)
    if weight is None:
        weight = torch.empty(shape[0])
    weight = weight.to(device).contiguous()
    dist.broadcast(weight, src=0)
    layer = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False, device=device, dtype=torch.float32)
    with torch.no_grad():
        layer.weight.copy_(weight)
    return layer


def rewards(model: Any, rows: list[list[int]], pad_token_id: int) -> tuple[Any, Any]:
    """``(rewards [B, 1], attention_mask [B, T])`` of token rows: the score layer on the final hidden state at each
    row's last token that is not ``pad_token_id`` (transformers' sequence-classification pooling), rows right-padded."""
    import torch
    import torch.nn.functional as F
    from swiftcore_megatron import eager_on_cpu

    device = next(model.parameters()).device
    longest = max(len(r) for r in rows)
    ids = torch.stack([F.pad(torch.tensor(r), (0, longest - len(r)), value=pad_token_id) for r in rows]).to(device)
    mask = torch.stack([torch.arange(longest) < len(r) for r in rows]).long().to(device)
    positions = torch.arange(longest, device=device).unsqueeze(0).expand_as(ids)
    model.post_process = False  # the decoder's output (after the final norm), not the vocabulary logits
    try:
        with eager_on_cpu():
            hidden = model(input_ids=ids, position_ids=positions, attention_mask=None)  # [T, B, H]
    finally:
        model.post_process = True
    last = (torch.arange(longest, device=device) * (ids != pad_token_id)).argmax(-1)
    pooled = hidden.transpose(0, 1)[torch.arange(len(rows), device=device), last]
    return model.reward_score(pooled.float()), mask


class RMLoop(TrainLoop):
    """:class:`~swiftcore_train_megatron.loop.TrainLoop` with the reward model's step, evaluation and checkpoints.

    Args (besides the loop's):
        options: the ``rm`` recipe's ``RMOptions``.
    """

    def __init__(self, *, options: Any, **loop: Any) -> None:
        super().__init__(**loop)
        self.options = options
        self._window: dict[str, list[float]] = {}

    def _pairs_loss(self, samples: list[dict], *, training: bool, group: Any = None) -> tuple:
        rows = [s["chosen_ids"] for s in samples] + [s["rejected_ids"] for s in samples]
        scores, mask = rewards(self.model, rows, self.pad_token_id)
        from swiftcore_recipe_preference import reward_loss

        return reward_loss(scores, mask, self.options, training=training, group=group)

    def _train_step(self) -> tuple[float, float, int]:
        """One optimiser step over every micro-batch of every data-parallel rank; ``(loss, grad norm, tokens)``
        (each micro-batch's mean loss counts ``1 / micro-batches`` of the step, as in TRL's trainer)."""
        import torch
        import torch.distributed as dist
        from megatron.core import parallel_state

        per_rank = self.schedule.micro_batches(self.step)
        n_micro = sum(len(batches) for batches in per_rank)
        mine = per_rank[parallel_state.get_data_parallel_rank()]
        dp_group = parallel_state.get_data_parallel_group()
        loss_sum = torch.zeros((), dtype=torch.float64, device=next(self.model.parameters()).device)
        for batch in mine:
            loss, metrics = self._pairs_loss([self.train_samples[i] for i in batch], training=True, group=dp_group)
            (loss / n_micro).backward()
            loss_sum += float(loss.detach())
            for name, value in metrics.items():
                self._window.setdefault(name, []).append(value)
        if dist.get_world_size(dp_group) > 1:
            dist.all_reduce(loss_sum, group=dp_group)
        norm = self._apply_gradients()
        tokens = sum(
            len(self.train_samples[i]["chosen_ids"]) + len(self.train_samples[i]["rejected_ids"])
            for batches in per_rank
            for mb in batches
            for i in mb
        )
        return float(loss_sum) / n_micro, norm, tokens

    def _log(self, record: dict[str, Any]) -> None:
        """A training record takes TRL's metrics: each the mean of its micro-batch values since the last one."""
        if "loss" in record:
            record = {**record, **{name: sum(v) / len(v) for name, v in self._window.items()}}
            self._window = {}
        super()._log(record)

    def _eval_record(self) -> dict[str, float]:
        """``eval_loss`` (a mean over the pairs) and TRL's ``eval_accuracy``, ``eval_margin`` and reward range
        (means of the batches' values); every rank scores all pairs, in batches of ``--batch-size``."""
        import torch

        values: dict[str, list[float]] = {}
        self.model.eval()
        with torch.no_grad():
            size = self.cfg.batch_size
            for start in range(0, len(self.val_samples), size):
                batch = self.val_samples[start : start + size]
                loss, metrics = self._pairs_loss(batch, training=False)
                values.setdefault("loss", []).extend([float(loss)] * len(batch))
                for name, value in metrics.items():
                    values.setdefault(name, []).append(value)
        self.model.train()
        return {f"eval_{name}": sum(v) / len(v) for name, v in values.items()}

    def resume(self, checkpoint: Path) -> None:
        """The SFT loop's resume of the decoder (and its optimizer state, the score layer's included), then the score
        layer's trained weights from the checkpoint's sequence classifier (the megatron shards hold the decoder only).
        """
        import torch

        head = self.model._modules.pop("reward_score")
        try:
            super().resume(checkpoint)
        finally:
            self.model._modules["reward_score"] = head
        with torch.no_grad():
            head.weight.copy_(_saved_score(checkpoint).to(head.weight.device, head.weight.dtype))

    def _save(self) -> Path:
        """The SFT loop's checkpoint of the decoder (the score layer left out of the megatron shards, which the
        bridge maps), then on rank 0 its Hugging Face export replaced by the whole sequence classifier."""
        import torch.distributed as dist

        head = self.model._modules.pop("reward_score")
        try:
            path = super()._save()
        finally:
            self.model._modules["reward_score"] = head
        if dist.get_rank() == 0:
            if self.lora is not None:  # as the rm recipe does: the adapter merged into the decoder it adapts
                _merge_adapter(path, Path(self.cfg.model))
            _as_sequence_classifier(path, head, self.pad_token_id)
        dist.barrier()
        return path


def _saved_score(checkpoint: Path) -> Any:
    """The score layer's weight (``score.weight``) of the sequence classifier a checkpoint of this recipe holds.

    Raises:
        SwiftcoreError: the checkpoint has none (it was not saved by ``--recipe rm``).
    """
    from safetensors import safe_open

    for file in sorted(checkpoint.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as tensors:
            if "score.weight" in tensors.keys():
                return tensors.get_tensor("score.weight")
    raise SwiftcoreError(
        f"--resume-from-checkpoint {str(checkpoint)!r}: no score.weight in its *.safetensors, so it is no reward "
        "model checkpoint of --recipe rm; resume from a checkpoint-N of an rm run"
    )


def _merge_adapter(checkpoint: Path, model_dir: Path) -> None:
    """Replace the peft adapter a LoRA checkpoint holds by the base model (``model_dir``'s files) with the adapter
    merged into its weights (``W + alpha / r * B @ A`` per adapted layer), as the ``rm`` recipe saves LoRA runs."""
    import shutil

    from safetensors.torch import load_file, save_file

    config = json.loads((checkpoint / "adapter_config.json").read_text(encoding="utf-8"))
    scaling = config["lora_alpha"] / config["r"]
    adapter = load_file(str(checkpoint / "adapter_model.safetensors"))
    deltas = {}
    for key, lora_a in adapter.items():
        if key.endswith(".lora_A.weight"):
            module = key.removeprefix("base_model.model.").removesuffix(".lora_A.weight")
            lora_b = adapter[key.replace(".lora_A.", ".lora_B.")]
            deltas[f"{module}.weight"] = (lora_b.double() @ lora_a.double()) * scaling
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        (checkpoint / name).unlink()
    shutil.copy2(model_dir / "config.json", checkpoint / "config.json")
    for index in model_dir.glob("*.safetensors.index.json"):
        shutil.copy2(index, checkpoint / index.name)
    for file in sorted(model_dir.glob("*.safetensors")):
        tensors = load_file(str(file))
        for key in deltas.keys() & tensors.keys():
            tensors[key] = (tensors[key].double() + deltas.pop(key)).to(tensors[key].dtype)
        save_file(tensors, str(checkpoint / file.name), metadata={"format": "pt"})
    if deltas:
        raise SwiftcoreError(f"--tuner lora: the adapter names weights {sorted(deltas)[:3]} that {model_dir} lacks")


def _as_sequence_classifier(checkpoint: Path, head: Any, pad_token_id: int) -> None:
    """Rewrite ``checkpoint``'s Hugging Face model (the decoder the bridge exported) as the ``rm`` recipe's
    ``*ForSequenceClassification`` (one label, ``pad_token_id`` set) with ``head``'s weights as its score layer."""
    import torch
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(checkpoint, num_labels=1, dtype=torch.float32)
    with torch.no_grad():
        model.score.weight.copy_(head.weight.detach().cpu())
    model.config.pad_token_id = pad_token_id
    for old in [*checkpoint.glob("*.safetensors"), *checkpoint.glob("*.safetensors.index.json")]:
        old.unlink()
    model.save_pretrained(checkpoint, safe_serialization=True)  # beside MCORE_SUBDIR, left as it is
