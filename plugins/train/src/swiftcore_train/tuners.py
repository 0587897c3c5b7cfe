"""Tuners: full fine-tuning or LoRA (peft), with the model spec deciding what is frozen and what LoRA skips."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

from swiftcore.api import ModelSpec, SwiftcoreError
from swiftcore.api.train import TrainConfig

__all__ = ["apply_tuner", "check_target_modules", "freeze_parts", "lora_config", "trainable_summary"]

log = logging.getLogger("swiftcore.train")

#: peft's shorthand for "every linear layer but the output head".
ALL_LINEAR = "all-linear"


def _matches(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _frozen_parts(spec: ModelSpec, cfg: TrainConfig) -> list[tuple[str, tuple[str, ...]]]:
    """``(flag, prefixes)`` of each part the freeze flags freeze."""
    return [
        (flag, prefixes)
        for flag, on, prefixes in (
            ("--freeze-vision", cfg.freeze_vision, spec.parts.vision_tower),
            ("--freeze-audio", cfg.freeze_audio, spec.parts.audio_tower),
            ("--freeze-projector", cfg.freeze_projector, spec.parts.projector),
        )
        if on and prefixes
    ]


def freeze_parts(model: Any, spec: ModelSpec, cfg: TrainConfig) -> list[str]:
    """Freeze the vision tower / audio tower / projector as the flags ask; returns the frozen prefixes."""
    frozen = [prefix for _, prefixes in _frozen_parts(spec, cfg) for prefix in prefixes]
    if frozen:
        for name, param in model.named_parameters():
            if _matches(name, tuple(frozen)):
                param.requires_grad_(False)
    return frozen


def _lora_exclude_regex(spec: ModelSpec, cfg: TrainConfig) -> str | None:
    patterns = list(spec.lora_exclude_modules)
    # Frozen towers stay out of LoRA too: adapters on a frozen encoder would train it after all.
    for _, prefixes in _frozen_parts(spec, cfg):
        patterns.extend(re.escape(p) + r"(\..*)?" for p in prefixes)
    patterns.extend(re.escape(p) + r"(\..*)?" for p in spec.parts.lm_head)
    if not patterns:
        return None
    return r"^(" + "|".join(f"(?:{p})" for p in patterns) + r")$"


def _targets(spec: ModelSpec, cfg: TrainConfig) -> tuple[str, ...]:
    return tuple(cfg.target_modules or spec.lora_target_modules)


def lora_config(spec: ModelSpec, cfg: TrainConfig, *, task_type: str | None = "CAUSAL_LM") -> Any:
    """The peft ``LoraConfig`` for ``spec`` under ``cfg``: rank, alpha, targets, and the spec's exclusions.

    Args:
        spec: the model spec (default targets, modules kept out of LoRA, frozen parts).
        cfg: the training config (rank, alpha, dropout, ``--target-modules``, freeze flags).
        task_type: peft's task type; None for a bare decoder wrapped by a head (no generation wrapper).
    """
    from peft import LoraConfig

    targets = _targets(spec, cfg)
    target: str | list[str] = ALL_LINEAR if targets == (ALL_LINEAR,) else list(targets)
    return LoraConfig(
        r=cfg.lora_rank,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=target,
        exclude_modules=_lora_exclude_regex(spec, cfg),
        task_type=task_type,
    )


# ------------------------------------------------------------------------------ target checks


def _short_name(name: str) -> str:
    """What ``--target-modules`` would name a module by: its last part (``q_proj``), or the last two
    when that is a bare index (``merger.0``), which would match every block's first child."""
    parts = name.split(".")
    return ".".join(parts[-2:]) if parts[-1].isdigit() and len(parts) > 1 else parts[-1]


def _module_kinds() -> tuple[tuple[type, ...], tuple[type, ...]]:
    """``(linear classes, every class peft's LoRA can wrap)``; as peft's ``all-linear`` and LoRA dispatch see them."""
    import torch
    from transformers.pytorch_utils import Conv1D

    linear = (torch.nn.Linear, Conv1D)
    return linear, (
        *linear,
        torch.nn.Embedding,
        torch.nn.Conv1d,
        torch.nn.Conv2d,
        torch.nn.Conv3d,
        torch.nn.MultiheadAttention,
    )


def _kept_out_reason(name: str, spec: ModelSpec, cfg: TrainConfig) -> str | None:
    """Why LoRA leaves module ``name`` alone (the same rules as :func:`_lora_exclude_regex`), or None."""
    if _matches(name, tuple(spec.parts.lm_head)):
        return "the output head, which LoRA leaves out (train it with --tuner full)"
    for pattern in spec.lora_exclude_modules:
        if re.fullmatch(pattern, name):
            return f"kept out of LoRA by model {spec.name!r} ({spec.provider}): lora_exclude_modules pattern {pattern}"
    for flag, prefixes in _frozen_parts(spec, cfg):
        if _matches(name, prefixes):
            no_flag = flag.replace("--", "--no-", 1)
            return f"frozen by {flag} (pass {no_flag} to adapt it)"
    return None


def _target_matches(name: str, target: str) -> bool:
    """peft's rule for a list of targets: the full module name, or a dotted suffix of it."""
    return name == target or name.endswith("." + target)


def _preview(names: list[str], limit: int = 3) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def check_target_modules(model: Any, spec: ModelSpec, cfg: TrainConfig) -> None:
    """Check the LoRA targets against ``model`` before peft sees them.

    Every ``--target-modules`` name must match at least one module LoRA may adapt (not the output
    head, not a spec exclusion or a frozen tower), and only modules of a kind LoRA can wrap; ``all-linear``
    stands alone. peft would fail with a generic traceback, or silently skip a mistyped name.
    The spec's own default targets only need to adapt something in all (a family's default list may
    name modules that some of its variants lack).

    Args:
        model: the loaded model, not yet wrapped by peft.
        spec: its model spec (default targets, exclusions, parts).
        cfg: the training config (``target_modules``, freeze flags).

    Raises:
        SwiftcoreError: naming what matched, what did not and why, and the targetable linear modules.
    """
    targets = _targets(spec, cfg)
    given = bool(cfg.target_modules)
    source = "--target-modules" if given else f"model {spec.name!r} ({spec.provider}) lora_target_modules"
    linear_kinds, lora_kinds = _module_kinds()
    modules = [(name, module) for name, module in model.named_modules() if name]
    reasons = {name: _kept_out_reason(name, spec, cfg) for name, _ in modules}
    targetable = sorted({_short_name(n) for n, m in modules if isinstance(m, linear_kinds) and reasons[n] is None})
    available = (
        f"Targetable linear modules of {spec.name!r}: {', '.join(targetable) or 'none'} "
        f"(or {ALL_LINEAR} alone for all of them); a dotted suffix such as self_attn.q_proj narrows a name."
    )
    if ALL_LINEAR in targets:
        if len(targets) > 1:
            others = ", ".join(repr(t) for t in targets if t != ALL_LINEAR)
            raise SwiftcoreError(
                f"{source}: {ALL_LINEAR!r} already targets every linear module; give it alone, or list module "
                f"names instead of it (got {others} as well). {available}"
            )
        if not targetable:
            raise SwiftcoreError(f"{source}: {ALL_LINEAR!r} finds no linear module LoRA may adapt. {available}")
        return

    matched: dict[str, int] = {}
    problems: list[str] = []
    for target in targets:
        hits = [(n, m) for n, m in modules if _target_matches(n, target)]
        adapted = [(n, m) for n, m in hits if reasons[n] is None]
        unsupported = [f"{n} ({type(m).__name__})" for n, m in adapted if not isinstance(m, lora_kinds)]
        if unsupported:
            problems.append(
                f"{target!r} matches {_preview(unsupported)}, which LoRA cannot adapt "
                "(it wraps linear, embedding and convolution layers)"
            )
        elif adapted:
            matched[target] = len(adapted)
        elif hits:
            name = hits[0][0]
            problems.append(f"{target!r} matches only modules LoRA leaves alone: {name} is {reasons[name]}")
        else:
            problems.append(f"{target!r} matches no module of {type(model).__name__}")
    if not problems or (not given and matched):
        return
    ok = "; ".join(f"{t!r} matched {n} module{'s' if n != 1 else ''}" for t, n in matched.items())
    raise SwiftcoreError(f"{source}: {'; '.join(problems)}." + (f" ({ok}.)" if ok else "") + f" {available}")


def _absolute_base(peft_model: Any, model_dir: str) -> None:
    """Make the adapter name its base by absolute path (peft stores ``--model`` as given).

    A relative ``base_model_name_or_path`` only resolves from the training run's working directory,
    so ``infer`` / ``export --merge-lora`` on the adapter would fail from anywhere else. A hub id
    (no such local directory) is left as it is.
    """
    local = Path(model_dir).expanduser()
    if not (local / "config.json").is_file():
        return
    for config in getattr(peft_model, "peft_config", {}).values():
        config.base_model_name_or_path = os.path.abspath(local)


def apply_tuner(model: Any, spec: ModelSpec, cfg: TrainConfig) -> Any:
    """Return the model ready to train: parts frozen per flags; wrapped in a peft LoRA model for ``lora``.

    Raises:
        SwiftcoreError: a LoRA target adapts nothing, or names a module LoRA cannot wrap
            (see :func:`check_target_modules`).
    """
    if cfg.tuner == "lora":
        check_target_modules(model, spec, cfg)  # before anything is changed or peft raises
    freeze_parts(model, spec, cfg)
    if cfg.tuner == "full":
        return model
    from peft import get_peft_model

    peft_model = get_peft_model(model, lora_config(spec, cfg))
    _absolute_base(peft_model, cfg.model)
    return peft_model


def trainable_summary(model: Any) -> str:
    """``trainable 1,234 / 56,789 parameters (2.17%)``."""
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return f"trainable {trainable:,} / {total:,} parameters ({100.0 * trainable / max(total, 1):.2f}%)"
