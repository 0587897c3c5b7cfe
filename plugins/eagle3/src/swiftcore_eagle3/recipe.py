"""The ``eagle3`` recipe: train an Eagle3 draft head for a frozen target on a swiftcore dataset.

Each chat is encoded by the target's template with the :class:`~swiftcore.api.template.SampleEncoder` that ``sft``
uses; the target runs on it (frozen, in this process) and the draft learns, over ``--ttt-steps`` steps ahead, the
target's next-token distribution on the trained (assistant) tokens (speculators' Eagle3 forward and KL loss). With
``--draft-vocab-size N`` the draft predicts over the N tokens the dataset trains on most (speculators' ``d2t`` /
``t2d``), and the loss compares it with the target's distribution renormalised over those N tokens, as
speculators' loss does (the target's head cut to the same rows). The draft is written in speculators' format to
``OUT/checkpoint-STEPS``.
"""

from __future__ import annotations

import json
import logging
import math
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swiftcore.api import SwiftcoreError
from swiftcore_eagle3.options import Eagle3Options, default_aux_layers

if TYPE_CHECKING:
    from swiftcore_train import TrainConfig, TrainResult

    from swiftcore.api import PluginSet

log = logging.getLogger(__name__)

__all__ = ["run", "packed_batch"]


def _refuse_unsupported(cfg: TrainConfig) -> None:
    problems = []
    if cfg.resume_from_checkpoint:
        problems.append("--resume-from-checkpoint (train the draft again from the start)")
    if cfg.packing or cfg.padding_free:
        problems.append("--packing / --padding-free (the draft packs each batch itself)")
    if cfg.val_dataset or cfg.split_ratio:
        problems.append("--val-dataset / --split-ratio (measure a draft with speculative_generate instead)")
    if cfg.gradient_accumulation_steps != 1:
        problems.append("--gradient-accumulation-steps (raise --batch-size instead)")
    if problems:
        raise SwiftcoreError("--recipe eagle3 does not take " + "; ".join(problems))


def packed_batch(
    target: Any, samples: list[dict], aux_layer_ids: list[int], features: list[tuple[Any, Any]] | None = None
) -> dict[str, Any]:
    """The draft's training inputs for ``samples`` (encoded chats): the target run on each, shifted as speculators'
    ``shift_batch`` shifts (token ``t + 1`` with the target's hidden states at ``t`` and its final state at
    ``t + 1``), and the samples packed in one row told apart by ``document_ids``. The loss mask is the samples'
    trained tokens (``labels != -100``). With ``features`` (each sample's ``(aux, last)``, e.g. from
    :class:`~swiftcore_eagle3.hidden_cache.HiddenStateCache`) the target does not run."""
    import torch

    from swiftcore_eagle3.draft import target_features

    parts: dict[str, list[Any]] = {k: [] for k in ("input_ids", "hidden", "last", "mask", "pos", "doc")}
    for doc, sample in enumerate(samples):
        ids = torch.tensor([list(sample["input_ids"])], dtype=torch.long)
        labels = torch.tensor([list(sample["labels"])], dtype=torch.long)
        if features is None:
            out = target_features(target, ids, aux_layer_ids)
            aux, last = out.aux, out.last
        else:
            aux, last = features[doc]
        n = ids.shape[1] - 1
        parts["input_ids"].append(ids[:, 1:])
        parts["hidden"].append(aux[:, :-1])
        parts["last"].append(last[:, 1:])
        parts["mask"].append(labels[:, 1:] != -100)
        parts["pos"].append(torch.arange(1, n + 1)[None])
        parts["doc"].append(torch.full((1, n), doc, dtype=torch.long))
    return {
        "input_ids": torch.cat(parts["input_ids"], dim=1),
        "hidden_states": torch.cat(parts["hidden"], dim=1),
        "verifier_last_hidden_states": torch.cat(parts["last"], dim=1),
        "loss_mask": torch.cat(parts["mask"], dim=1),
        "position_ids": torch.cat(parts["pos"], dim=1),
        "document_ids": torch.cat(parts["doc"], dim=1),
    }


def run(cfg: TrainConfig, plugins: PluginSet, options: Eagle3Options) -> TrainResult:
    """Train an Eagle3 draft head for ``cfg.model`` on ``cfg.dataset``; see ``swiftcore train --recipe eagle3
    --help``. Uses ``--max-steps`` (or ``--num-train-epochs``), ``--batch-size``, ``--learning-rate``,
    ``--lr-scheduler``, ``--warmup-ratio``, ``--max-grad-norm``, ``--max-length``, ``--loss-policy``,
    ``--logging-steps`` and ``--seed``; ``--tuner`` does not apply (the target stays frozen). With
    ``--hidden-states-cache DIR`` the target runs once per sample, before training, or not at all when ``DIR``
    already holds its hidden states for this checkpoint and data (:mod:`swiftcore_eagle3.hidden_cache`).

    Raises:
        SwiftcoreError: an option this recipe does not take, a bad model, template or dataset, or no sample with a
            trained token.
    """
    from swiftcore_train import (
        TrainResult,
        check_recipe_fits_model,
        encode_records,
        load_template,
        load_train_val_records,
        start_run,
    )

    from swiftcore.api.models import check_requirements, load_model, resolve_model_spec

    if isinstance(options, dict):  # called directly, not through run_training
        options = Eagle3Options(**options)
    from swiftcore_eagle3.draft import require_speculators

    cfg.validate()
    _refuse_unsupported(cfg)
    require_speculators()
    spec = resolve_model_spec(cfg.model, plugins, model_type=cfg.model_type)
    check_requirements(spec)
    check_recipe_fits_model(cfg, spec, plugins)
    output_dir = Path(cfg.output_dir)
    records, _ = load_train_val_records(cfg)  # every row checked before the tokenizer loads
    template_spec, template, tokenizer = load_template(cfg, spec, plugins)
    samples = [s for s in encode_records(records, template, tokenizer, cfg, desc="encoding train") if s is not None]
    samples = [s for s in samples if len(s["input_ids"]) > 2 and any(x != -100 for x in s["labels"][1:])]
    if not samples:
        raise SwiftcoreError(f"--dataset {', '.join(cfg.dataset)}: no sample has a trained token to learn from")
    start_run(cfg, output_dir, spec, plugins, fresh=True, template=template_spec)

    import torch
    from speculators.losses import resolve_loss_config
    from transformers import get_scheduler

    from swiftcore_eagle3.draft import build_draft, save_draft, token_frequencies

    torch.manual_seed(cfg.seed)
    target = load_model(spec, cfg.model, plugins, torch_dtype="float32").eval()
    target.requires_grad_(False)
    num_layers = target.config.get_text_config().num_hidden_layers
    aux_ids = options.aux_layer_ids() or default_aux_layers(num_layers)
    draft = build_draft(
        target,
        cfg.model,
        aux_layer_ids=aux_ids,
        num_layers=options.draft_layers,
        speculative_tokens=options.ttt_steps,
        seed=cfg.seed,
        draft_vocab_size=options.draft_vocab_size,
        token_freq=token_frequencies(samples) if options.draft_vocab_size else None,
    ).train()
    cache = None
    if options.hidden_states_cache:
        from swiftcore_eagle3.hidden_cache import HiddenStateCache, fingerprint

        cache = HiddenStateCache(options.hidden_states_cache, fingerprint(cfg.model, samples, aux_ids, "float32"))
        cache.prepare(target, samples, aux_ids)
    trainable = [p for p in draft.parameters() if p.requires_grad]
    log.info(
        "eagle3 draft: %d trainable parameters (%d in all), %d layer(s), target hidden states %s, vocabulary %d",
        sum(p.numel() for p in trainable),
        sum(p.numel() for p in draft.parameters() if p is not draft.verifier_lm_head.weight),
        options.draft_layers,
        aux_ids,
        draft.draft_vocab_size,
    )
    per_epoch = math.ceil(len(samples) / cfg.batch_size)
    steps = cfg.max_steps if cfg.max_steps > 0 else max(1, math.ceil(cfg.num_train_epochs * per_epoch))
    optimizer = torch.optim.AdamW(trainable, lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    scheduler = get_scheduler(
        cfg.lr_scheduler, optimizer, num_warmup_steps=int(cfg.warmup_ratio * steps), num_training_steps=steps
    )
    loss_config = resolve_loss_config("kl_div", "eager")  # the fused loss needs Triton
    rng = random.Random(cfg.seed)
    order: list[int] = []
    log_file = output_dir / "logs.jsonl"
    final_loss = None
    with log_file.open("a", encoding="utf-8") as logs:
        for step in range(1, steps + 1):
            if len(order) < cfg.batch_size:
                epoch = list(range(len(samples)))
                rng.shuffle(epoch)
                order.extend(epoch)
            indices = order[: cfg.batch_size]
            del order[: cfg.batch_size]
            batch = [samples[i] for i in indices]
            cached = None
            if cache is not None:
                cached = [cache.read(i, len(samples[i]["input_ids"])) for i in indices]
            inputs = packed_batch(target, batch, aux_ids, cached)
            _, loss, metrics = draft(**inputs, ttt_steps=options.ttt_steps, loss_config=loss_config)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(trainable, cfg.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            final_loss = float(loss.detach())
            if step % cfg.logging_steps == 0 or step == steps:
                record = {"step": step, "loss": round(final_loss, 6), "learning_rate": scheduler.get_last_lr()[0]}
                for i in range(options.ttt_steps):
                    total = float(metrics[f"full_acc_{i}_total"])
                    record[f"acc_{i}"] = round(float(metrics[f"full_acc_{i}_sum"]) / total, 4) if total else None
                logs.write(json.dumps(record) + "\n")
                logs.flush()
                log.info("step %d/%d: %s", step, steps, record)
    checkpoint = save_draft(draft, output_dir / f"checkpoint-{steps}")
    return TrainResult(
        output_dir=output_dir,
        last_checkpoint=checkpoint,
        log_file=log_file,
        plot_file=None,
        train_samples=len(samples),
        global_step=steps,
        final_loss=final_loss,
    )
