"""What the preference recipes share: checks and data before any model loads, TRL configs from swiftcore's flags,
and the trainer behaviour every swiftcore run has (atomic checkpoints, no telemetry, no model card)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swiftcore_train import check_recipe_fits_model, load_template

from swiftcore.api import SwiftcoreError
from swiftcore_recipe_preference.data import Pair, load_pairs, split_pairs

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = [
    "Prepared",
    "checkpoint_extras",
    "chunk_trainer_heads",
    "finish",
    "plot_reward_margins",
    "prepare",
    "refuse_untemplated_tools",
    "router_aux_loss_coef",
    "require_encoded",
    "swift_trl_trainer",
    "trl_arguments",
]

log = logging.getLogger("swiftcore.preference")

#: The recipes whose trainers score through TRL's fused-LM-head forward, which ``--padding-free`` packs.
PADDING_FREE_RECIPES = ("dpo", "kto")


@dataclass
class Prepared:
    """A run's inputs, all checked: the model spec, template, tokenizer and the validated pairs."""

    spec: Any
    template_spec: Any
    template: Any
    tokenizer: Any
    train: list[Pair]
    val: list[Pair] = field(default_factory=list)


def prepare(cfg: Any, plugins: PluginSet, recipe: str, *, load: bool = True) -> Prepared:
    """Check everything checkable before a model is loaded: options, model type, template vs tokenizer, and
    (``load``) every row, read as preference pairs.

    Raises:
        SwiftcoreError: an option the preference recipes do not support, or a template whose special tokens
            the tokenizer lacks.
        DataError: a bad dataset row (file, line and field).
    """
    from swiftcore.api.models import check_requirements, resolve_model_spec

    cfg.validate()
    unsupported = [
        flag
        for flag, on in (
            ("--packing", cfg.packing),
            ("--padding-free", cfg.padding_free and recipe not in PADDING_FREE_RECIPES),
            ("--resume-from-checkpoint", bool(cfg.resume_from_checkpoint)),
        )
        if on
    ]
    if unsupported:
        # A preference batch must keep each chosen/rejected pair together, which swiftcore's packer (bins across
        # batches) does not; --padding-free packs each batch into one row (padding_free.py) for DPO and KTO.
        hint = " (--padding-free packs each batch's sequences into one row)" if recipe in PADDING_FREE_RECIPES else ""
        raise SwiftcoreError(f"--recipe {recipe}: {', '.join(unsupported)} not supported yet; leave them off{hint}")
    spec = resolve_model_spec(cfg.model, plugins, model_type=cfg.model_type)
    check_requirements(spec)
    check_recipe_fits_model(cfg, spec, plugins)
    if not load:  # the recipe reads its own kind of rows (KTO's unpaired examples)
        return Prepared(spec, *load_template(cfg, spec, plugins), [], [])
    # Every pair is read and checked before the tokenizer loads (importing transformers takes seconds).
    pairs = load_pairs(cfg.dataset, skip_bad_rows=cfg.skip_bad_rows)
    if cfg.val_dataset:
        train, val = pairs, load_pairs(cfg.val_dataset, skip_bad_rows=cfg.skip_bad_rows)
    else:
        train, val = split_pairs(pairs, cfg.split_ratio, cfg.seed)
    template_spec, template, tokenizer = load_template(cfg, spec, plugins)
    # one record a pair (its prompt and both replies), so the error names each row once
    both = [{**p.record(p.chosen), "messages": [*p.prompt["messages"], p.chosen, p.rejected]} for p in [*train, *val]]
    refuse_untemplated_tools(template_spec, both)
    log.info(
        "recipe %s: model %s (%s), template %s (%s), %d train / %d val pairs",
        recipe,
        spec.name,
        spec.provider,
        template_spec.name,
        template_spec.provider,
        len(train),
        len(val),
    )
    return Prepared(spec, template_spec, template, tokenizer, train, val)


def refuse_untemplated_tools(template_spec: Any, records: list[dict]) -> None:
    """Refuse tool rows (``tools``, ``tool_calls``, a ``tool`` turn) for a template with no tool format, as the
    ``sft`` recipe does: its official chat template renders none of them, so a tool-call reply would train as an
    empty one (``records``: canonical records with their ``_source`` file:line).

    Raises:
        DataError: naming the first offending rows (file:line), the template and ``--agent-template``.
    """
    if template_spec.official and "tools" not in template_spec.supports:  # OLMoE, Qwen3-ASR: no tool format
        from swiftcore_data import refuse_tool_rows

        refuse_tool_rows(records, template_spec.name)


def trl_arguments(config_cls: Any, cfg: Any, output_dir: Path, *, evaluate: bool, **trl: Any) -> Any:
    """A TRL config (``DPOConfig``, ``RewardConfig``) holding exactly what swiftcore's ``training_arguments``
    maps every flag to, plus the recipe's own ``trl`` fields (TRL's own defaults never stand in for a flag)."""
    from swiftcore_train import training_arguments

    return training_arguments(cfg, output_dir, evaluate=evaluate, args_class=config_cls, save_only_model=True, **trl)


def require_encoded(dataset: Any, columns: set[str], dataset_name: str) -> None:
    """Refuse a dataset that lacks the columns swiftcore's encoding writes (TRL's re-tokenisation is skipped)."""
    missing = columns - set(dataset.column_names)
    if missing:
        raise SwiftcoreError(f"{dataset_name} dataset lacks the encoded columns {sorted(missing)}")


def swift_trl_trainer(trl_cls: Any) -> Any:
    """``trl_cls`` (a TRL trainer) with swiftcore's atomic checkpoints and ``checkpoint_extras``.

    The subclass also sends no telemetry (TRL 1.16 pings the Hub whenever a trainer is built, unless
    ``HF_HUB_DISABLE_TELEMETRY`` is set; a swiftcore run never reaches the network on its own) and writes no
    model card (provenance lives in ``args.json`` and each checkpoint's ``swiftcore_args.json``, as for SFT).
    """
    from swiftcore_train import SwiftTrainer

    class SwiftTRLTrainer(SwiftTrainer, trl_cls):  # type: ignore[misc, valid-type]
        """The TRL trainer, checkpointing as :class:`~swiftcore_train.trainer.SwiftTrainer` does."""

        def _send_telemetry(self) -> None:
            return None  # no network call from a training run

        def create_model_card(self, *args: Any, **kwargs: Any) -> None:
            """No model card: the run's provenance is in ``args.json`` / ``swiftcore_args.json``."""
            return None

    SwiftTRLTrainer.__name__ = SwiftTRLTrainer.__qualname__ = f"Swift{trl_cls.__name__}"
    return SwiftTRLTrainer


def finish(trainer: Any, cfg: Any, output_dir: Path, *, train_samples: int, evaluate: bool) -> Any:
    """swiftcore's ``train_and_report`` (train, evaluate, loss plot, summary), plus a reward-margin plot.

    ``reward_margin.png`` shows the logged ``rewards/margins`` (DPO, KTO, CPO, SimPO, ORPO) or ``margin`` (RM)
    against the step, beside SFT's ``loss.png``; ``--no-plot`` turns both off.
    """
    from swiftcore_train import train_and_report

    result = train_and_report(trainer, cfg, output_dir, train_samples=train_samples, evaluate=evaluate)
    if cfg.plot and result.log_file.exists():
        plot_reward_margins(result.log_file, output_dir / "reward_margin.png")
    return result


def plot_reward_margins(log_file: Path, out: Path) -> Path | None:
    """Draw the reward margin (train, and eval when logged) against the step; None if the log has none."""
    import json

    rows = [json.loads(line) for line in log_file.read_text(encoding="utf-8").splitlines() if line.strip()]
    curves = {}
    for label, keys in (("train", ("rewards/margins", "margin")), ("eval", ("eval_rewards/margins", "eval_margin"))):
        points = [(r["step"], r[k]) for r in rows for k in keys if k in r]
        if points:
            curves[label] = points
    if not curves:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for label, points in curves.items():
        ax.plot(*zip(*points, strict=True), label=f"{label} reward margin", marker="o" if label == "eval" else None)
    ax.set_xlabel("step")
    ax.set_ylabel("reward margin (chosen - rejected)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def router_aux_loss_coef(model: Any) -> float | None:
    """The MoE load-balancing coefficient to give TRL's DPO / KTO config (None: TRL's default, the model's own).

    TRL 1.16's fused LM head adds the load-balancing loss by reading ``text_config.num_experts``; a MoE config
    that names it otherwise (DeepSeek-V4: ``n_routed_experts``) makes every step fail with an AttributeError.
    For such a model the term is left out (coefficient 0): the preference loss is unchanged, the router gets
    no balancing push during this run.
    """
    text = getattr(model, "config", None)
    text = text.get_text_config() if text is not None else None
    if text is None or not hasattr(text, "output_router_logits") or hasattr(text, "num_experts"):
        return None
    log.warning(
        "%s names its expert count otherwise than num_experts, which TRL's load-balancing loss reads; training "
        "without the MoE load-balancing term",
        type(text).__name__,
    )
    return 0.0


def chunk_trainer_heads(trainer: Any, chunk_size: int | None, policy_outputs: tuple[str, ...]) -> None:
    """``--loss-chunk-size`` for a TRL DPO / KTO trainer: the policy's and the reference's log-probs come from
    swiftcore-train's chunked lm_head (``chunk_size`` tokens' logits at a time, the SFT loss's chunking) in place of
    TRL's fused head; the same values and gradients (``tests/test_chunked_logps.py``). ``policy_outputs``: the
    per-token fields the trainer added the policy's head with (TRL's ``add_fused_lm_head(outputs=...)``).

    Call it after the trainer is built (TRL adds its head then) and before :func:`pack_trainer_models` (which packs
    whatever forward it finds). None: the default chunk size; 0, ``--fsdp`` or ``--deepspeed``: TRL's head (a MoE
    model's load-balancing loss, which TRL adds, comes from the chunked head too).
    """
    from swiftcore_train import DEFAULT_LOSS_CHUNK_SIZE, trainer_head_reason, use_chunked_lm_head

    size = DEFAULT_LOSS_CHUNK_SIZE if chunk_size is None else chunk_size
    reason = trainer_head_reason(trainer)
    policy = trainer.model.get_base_model() if hasattr(trainer.model, "get_base_model") else trainer.model
    use_chunked_lm_head(policy, size, outputs=policy_outputs, reason=reason)
    if getattr(trainer, "ref_model", None) is not None:
        use_chunked_lm_head(trainer.ref_model, size, reason=reason)


def checkpoint_extras(cfg: Any, args_record: dict) -> dict[str, str]:
    """File name -> text written into every checkpoint: ``swiftcore_args.json`` and the model's processor files.

    The same files SFT's checkpoints carry, so ``swiftcore infer`` / ``deploy`` treat both alike.
    """
    import json

    from swiftcore_media import processor_files

    return {"swiftcore_args.json": json.dumps(args_record, indent=2), **processor_files(cfg.model)}
