"""``cpo``, ``simpo`` and ``orpo``: the reference-free preference recipes, on TRL 1.16's CPOTrainer / ORPOTrainer.

Both trainers live in ``trl.experimental`` in TRL 1.16 (their API may change in a minor release; the plugin pins
``trl>=1.16,<1.17``). They tokenise raw text with ``processing_class(prompt)`` row by row; here the rows are
encoded by swiftcore's template first (:mod:`swiftcore_recipe_preference.encoding`) and handed over in the
columns those trainers' collator reads (``prompt_input_ids``, ``chosen_input_ids``, ``chosen_labels``, ...),
and their ``tokenize_row`` is made a no-op.

What TRL computes (and the tests check against these formulas):

- cpo: ``-log σ(β·(log π_c − log π_r)) + α·NLL(chosen reply)`` (hinge / ipo variants), log-probs summed.
- simpo: ``-log σ(β·(avg log π_c − avg log π_r) − γ)`` (+ ``α·NLL``), log-probs averaged per reply token.
- orpo: ``NLL(chosen) − β·log σ(log odds_c − log odds_r)`` with ``odds = p/(1−p)`` of the per-token average
  reply log-prob; TRL 1.16's NLL term covers the prompt and the reply tokens alike (the paper's covers the reply).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = ["build_reference_free_trainer", "legacy_columns", "run_cpo", "run_orpo", "run_simpo"]

log = logging.getLogger("swiftcore.preference")


def legacy_columns(sample: dict[str, list[int]]) -> dict[str, list[int]]:
    """``{"prompt_ids", "chosen_ids", "rejected_ids"}`` -> the columns CPOTrainer / ORPOTrainer's collator pads."""
    prompt = sample["prompt_ids"]
    out: dict[str, list[int]] = {"prompt_input_ids": prompt, "prompt_attention_mask": [1] * len(prompt)}
    for side in ("chosen", "rejected"):
        reply = sample[f"{side}_ids"]
        out[f"{side}_input_ids"] = prompt + reply
        out[f"{side}_attention_mask"] = [1] * (len(prompt) + len(reply))
        out[f"{side}_labels"] = [-100] * len(prompt) + reply
    return out


def _experimental(method: str) -> tuple[Any, Any]:
    """``(trainer class, config class)`` of ``method`` from ``trl.experimental``.

    TRL warns on every first import of ``trl.experimental`` that its API may change; the plugin pins
    ``trl<1.17`` and the loss tests check the trainers' results, so the warning is silenced here.
    """
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*trl.experimental")
        if method == "orpo":
            from trl.experimental.orpo import ORPOConfig, ORPOTrainer

            return ORPOTrainer, ORPOConfig
        from trl.experimental.cpo import CPOConfig, CPOTrainer

        return CPOTrainer, CPOConfig


def _trainer_class(method: str) -> Any:
    """TRL's CPOTrainer (cpo, simpo) or ORPOTrainer (orpo) on pre-encoded rows, with swiftcore's checkpointing."""
    base = _experimental(method)[0]

    from swiftcore_recipe_preference.common import swift_trl_trainer

    class PreEncodedTrainer(swift_trl_trainer(base)):  # type: ignore[misc]
        """The TRL trainer, taking rows already encoded by the family's swiftcore template."""

        def tokenize_row(self, feature: dict, model: Any = None) -> dict:
            """Nothing to add: the row already holds its encoded columns."""
            # The rows already hold the encoded columns (legacy_columns); TRL's own tokenisation of raw text
            # would bypass the family's chat template, so nothing is added here.
            return {}

    return PreEncodedTrainer


def _config(method: str, options: Any, cfg: Any, output_dir: Path, evaluate: bool) -> Any:
    from swiftcore_recipe_preference.common import trl_arguments

    common = dict(
        beta=options.beta,
        max_length=cfg.max_length,  # already applied when encoding; TRL only reads it when tokenising
        disable_dropout=True,
        model_init_kwargs=None,
        generate_during_eval=False,
        # The batches carry chosen_input_ids / rejected_input_ids, not the input_ids the Trainer counts.
        include_num_input_tokens_seen="no",
    )
    config_cls = _experimental(method)[1]
    if method == "orpo":
        return trl_arguments(config_cls, cfg, output_dir, evaluate=evaluate, **common)
    extra = (
        {"loss_type": "simpo", "simpo_gamma": options.simpo_gamma}
        if method == "simpo"
        else {"loss_type": options.loss_type}
    )
    return trl_arguments(
        config_cls,
        cfg,
        output_dir,
        evaluate=evaluate,
        label_smoothing=options.label_smoothing,
        cpo_alpha=options.cpo_alpha,
        **extra,
        **common,
    )


def build_reference_free_trainer(
    method: str,
    cfg: Any,
    options: Any,
    plugins: PluginSet,
    train: list[dict],
    val: list[dict],
    prepared: Any,
    output_dir: Path,
) -> Any:
    """The configured CPO / SimPO / ORPO trainer for encoded ``train`` / ``val`` samples."""
    import torch
    from datasets import Dataset
    from swiftcore_train import JsonlLogCallback, apply_tuner, trainable_summary

    from swiftcore.api.models import load_model

    torch.manual_seed(cfg.seed)
    dtype = "float32" if cfg.dtype == "float32" else cfg.dtype
    model = apply_tuner(load_model(prepared.spec, cfg.model, plugins, torch_dtype=dtype), prepared.spec, cfg)
    log.info(trainable_summary(model))
    tokenizer = prepared.tokenizer
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token  # the collator pads with it (the attention mask hides it)
    return _trainer_class(method)(
        model=model,
        args=_config(method, options, cfg, output_dir, evaluate=bool(val)),
        train_dataset=Dataset.from_list([legacy_columns(s) for s in train]),
        eval_dataset=Dataset.from_list([legacy_columns(s) for s in val]) if val else None,
        processing_class=tokenizer,
        callbacks=[JsonlLogCallback(output_dir / "logs.jsonl")],
    )


def _run(method: str, options_cls: Any, cfg: Any, plugins: PluginSet, options: Any) -> Any:
    from dataclasses import asdict

    from swiftcore_train import generation_defaults, start_run

    from swiftcore_recipe_preference.common import checkpoint_extras, finish, prepare
    from swiftcore_recipe_preference.encoding import encode_dpo_pairs

    options = options if isinstance(options, options_cls) else options_cls(**(options or {}))
    prepared = prepare(cfg, plugins, method)
    train = encode_dpo_pairs(prepared.train, prepared.template, prepared.tokenizer, cfg)
    val = encode_dpo_pairs(prepared.val, prepared.template, prepared.tokenizer, cfg) if prepared.val else []
    output_dir = Path(cfg.output_dir)
    trainer = build_reference_free_trainer(method, cfg, options, plugins, train, val, prepared, output_dir)
    args_record = start_run(
        cfg,
        output_dir,
        prepared.spec,
        plugins,
        fresh=True,
        template=prepared.template_spec,
        generation_defaults=generation_defaults([p.record(p.chosen) for p in prepared.train], prepared.template, cfg),
        preference={"recipe": method, **asdict(options)},
    )
    trainer.checkpoint_extras = checkpoint_extras(cfg, args_record)
    return finish(trainer, cfg, output_dir, train_samples=len(train), evaluate=bool(val))


def run_cpo(cfg: Any, plugins: PluginSet, options: Any = None) -> Any:
    """The ``cpo`` recipe: contrastive preference optimisation (no reference model); saves what SFT saves."""
    from swiftcore_recipe_preference.options import CPOOptions

    return _run("cpo", CPOOptions, cfg, plugins, options)


def run_simpo(cfg: Any, plugins: PluginSet, options: Any = None) -> Any:
    """The ``simpo`` recipe: SimPO (length-normalised, reference-free, target margin γ); saves what SFT saves."""
    from swiftcore_recipe_preference.options import SimPOOptions

    return _run("simpo", SimPOOptions, cfg, plugins, options)


def run_orpo(cfg: Any, plugins: PluginSet, options: Any = None) -> Any:
    """The ``orpo`` recipe: odds-ratio preference optimisation (SFT and preference in one loss, no reference)."""
    from swiftcore_recipe_preference.options import ORPOOptions

    return _run("orpo", ORPOOptions, cfg, plugins, options)
